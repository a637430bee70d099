// The CPU backend's bf16/f16 emulation (backend/cpu/half.h), on hand-made
// values whose exact results are known, so each check tells storage
// rounding, f32 accumulation and fp32 gradient accumulation apart:
//  - storage: an op's bf16 output is its f32 result rounded once to
//    nearest even (ties to even; f16 overflows to inf);
//  - accumulation in f32 inside an op: 1 + 2^-8 + 2^-8 is 1 + 2^-7 (a bf16
//    value) when summed in f32, but 1 when each partial sum is rounded to
//    bf16 (1 + 2^-8 is a tie that rounds to even, 1);
//  - wide tensors: an f32 parameter gradient accumulates the f32 product
//    without a bf16 rounding.
// The op harness runs every case in bf16 and f16 against f64 as well
// (tests/backend_ops/test_backend_ops_cpu.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"

namespace tripod {
namespace {

Tensor half_tensor(const std::vector<float>& v, const Shape& s, DType dt) {
  Tensor t = Tensor::empty(s, dt);
  for (size_t i = 0; i < v.size(); ++i) t.data_u16()[i] = dt == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
  return t;
}

TEST(CpuHalf, ComputesInBf16AndF16) {
  auto be = backend::make_cpu_backend();
  EXPECT_TRUE(be->computes_in(DType::BF16));
  EXPECT_TRUE(be->computes_in(DType::F16));
}

// 1 + 2^-8 is halfway between the bf16 neighbours 1 and 1 + 2^-7: ties to
// even give 1 (0x3f80); 1 + 3 * 2^-9 rounds up to 1 + 2^-7 (0x3f81).
TEST(CpuHalf, AddRoundsItsOutputOnceToNearestEven) {
  auto be = backend::make_cpu_backend();
  const float u = std::ldexp(1.f, -9);
  Tensor a = half_tensor({1.f, 1.f, -1.f, 256.f}, {4}, DType::BF16);
  Tensor b = half_tensor({2 * u, 3 * u, -2 * u, 1.f}, {4}, DType::BF16);
  Tensor out = be->empty({4}, DType::BF16);
  be->add(out, a, b);
  EXPECT_EQ(out.data_u16()[0], 0x3f80);  // 1 + 2^-8: tie, to even
  EXPECT_EQ(out.data_u16()[1], 0x3f81);  // 1 + 3*2^-9: up
  EXPECT_EQ(out.data_u16()[2], 0xbf80);  // -(1 + 2^-8): tie, to even
  EXPECT_EQ(out.data_u16()[3], 0x4380);  // 257: tie between 256 and 258, to even (256)
}

// out(1,1) = [1, 1, 1] . [1, 2^-8, 2^-8] = 1 + 2^-7 in f32; a bf16 running
// sum would stop at 1.
TEST(CpuHalf, MatmulAccumulatesInF32) {
  auto be = backend::make_cpu_backend();
  const float e = std::ldexp(1.f, -8);
  Tensor x = half_tensor({1.f, 1.f, 1.f}, {1, 3}, DType::BF16);
  Tensor w = half_tensor({1.f, e, e}, {1, 3}, DType::BF16);
  Tensor out = be->empty({1, 1}, DType::BF16);
  be->matmul_forward(out, x, w, nullptr);
  EXPECT_EQ(out.data_u16()[0], 0x3f81);  // 1 + 2^-7
}

// dweight (f32, the wide gradient) += dout^T inp without a bf16 rounding:
// 2^-9 + (1 + 2^-7) * 1 is not a bf16 value and must stay exact; dinp
// (bf16) is rounded.
TEST(CpuHalf, WideGradientsAccumulateInF32) {
  auto be = backend::make_cpu_backend();
  const float u = std::ldexp(1.f, -9);
  Tensor dout = half_tensor({1.f}, {1, 1}, DType::BF16);
  Tensor inp = half_tensor({1.f + 4 * u}, {1, 1}, DType::BF16);
  Tensor w = half_tensor({1.f + 3 * u}, {1, 1}, DType::BF16);  // rounds to 1 + 2^-7 on storage
  Tensor dw = be->empty({1, 1}, DType::F32);
  dw.data<float>()[0] = u;
  Tensor dinp = be->empty({1, 1}, DType::BF16);
  be->matmul_backward(&dinp, &dw, nullptr, dout, inp, w);
  EXPECT_EQ(dw.data<float>()[0], u + 1.f + 4 * u);
  EXPECT_EQ(dinp.data_u16()[0], 0x3f81);
}

// f16: 60000 + 10000 is past the largest finite value (65504): inf, as
// __float2half_rn gives on the GPU; this is what the fp16 loss scaler sees.
TEST(CpuHalf, F16OverflowsToInf) {
  auto be = backend::make_cpu_backend();
  Tensor a = half_tensor({60000.f, 60000.f}, {2}, DType::F16);
  Tensor b = half_tensor({10000.f, -12000.f}, {2}, DType::F16);
  Tensor out = be->empty({2}, DType::F16);
  be->add(out, a, b);
  EXPECT_EQ(out.data_u16()[0], 0x7c00);  // +inf
  EXPECT_EQ(f16_to_f32(out.data_u16()[1]), 48000.f);
  Tensor acc = be->empty({1}, DType::F32);
  be->zero(acc);
  be->sum_squares(acc, out);
  EXPECT_TRUE(std::isinf(acc.data<float>()[0]));
}

// An in-place op sees the tensor's values (widened, updated, rounded back).
TEST(CpuHalf, InPlaceOpsKeepTheirValues) {
  auto be = backend::make_cpu_backend();
  Tensor t = half_tensor({1.5f, -3.f}, {2}, DType::BF16);
  be->scale(t, 2.f);
  EXPECT_EQ(bf16_to_f32(t.data_u16()[0]), 3.f);
  EXPECT_EQ(bf16_to_f32(t.data_u16()[1]), -6.f);
}

}  // namespace
}  // namespace tripod
