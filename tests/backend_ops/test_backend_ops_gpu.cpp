// backend_ops on the CUDA backend: every case in f32, bf16 and f16 against
// the CPU backend in f64, with fresh inputs per (case, dtype) and outputs
// poisoned before each run. Skips cleanly when no GPU is visible
// (labels gpu, backend_ops).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <tuple>
#include <utility>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "harness.h"

namespace tripod::testing {
namespace {

backend::Backend& cuda() {
  static std::unique_ptr<backend::Backend> be = backend::make_cuda_backend(0);
  return *be;
}

class GpuOps : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(GpuOps, MatchesCpuFloat64) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  auto [index, dt] = GetParam();
  const OpCase& c = all_cases()[static_cast<size_t>(index)];
  if (c.f32_only && dt != DType::F32) GTEST_SKIP() << c.name << " runs on f32 state only";
  // The backend refuses FP8 attention where cuDNN cannot serve it (before
  // 9.19, or before Hopper): the cases (head size 128) cannot run there.
  if (c.name.rfind("attention_fp8", 0) == 0)
    if (const std::string why = cuda().fp8_attention_note(128); !why.empty())
      GTEST_SKIP() << c.name << ": " << why;
  auto ref = backend::make_cpu_backend();
  CaseResult r = run_case(c, cuda(), dt, *ref, 7000 + 31 * index + static_cast<int>(dt));
  std::printf("[%s %s] %s\n%s", cuda().name().c_str(), dtype_name(dt), c.name.c_str(),
              r.summary.c_str());
  EXPECT_TRUE(r.ok) << c.name << " " << dtype_name(dt) << "\n" << r.summary << r.detail;
}

// adamw_update with a compute_out (the one-pass kernel for bf16/f16) writes
// bit for bit what adamw_update then cast() write: the packed kernel (n a
// multiple of 4 at an aligned offset; 5M elements take several grid-stride
// rounds), the element loop (odd n, odd offset), and the f32 default.
TEST(GpuAdamW, ComputeOutIsTheUnfusedBits) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  for (DType dt : {DType::BF16, DType::F16, DType::F32})
    for (auto [n, offset] : {std::pair<int64_t, int64_t>{4096, 0}, {3001, 0}, {4096, 1}, {5000004, 4}})
      EXPECT_EQ(adamw_compute_out_mismatch(cuda(), dt, n, offset, 13), "")
          << dtype_name(dt) << " n=" << n << " offset=" << offset;
}

// The SwiGLU casts write what swiglu_* then fp8_cast_transpose write, bit
// for bit: the kernel's shapes (R, F multiples of 8: whole and cut tiles,
// an 8B-like width) and one it leaves to the unfused default (6 x 20).
TEST(GpuFp8, SwigluCastIsTheUnfusedBits) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  for (DType act : {DType::BF16, DType::F16, DType::F32})
    for (DType fp8 : {DType::E4M3, DType::E5M2})
      for (auto [R, F] : {std::pair<int64_t, int64_t>{64, 96}, {136, 264}, {8192 / 16, 14336 / 16}, {6, 20}})
        EXPECT_EQ(fp8_swiglu_cast_mismatch(cuda(), act, fp8, R, F, 17), "")
            << dtype_name(act) << " " << dtype_name(fp8) << " R=" << R << " F=" << F;
}

// Block scaling's SwiGLU casts write what swiglu_* then fp8_block_cast
// write, bit for bit: whole and cut tiles, a width whose halves meet inside
// a 128-column tile (F = 200: the backward's tile 1 holds d gate and d up),
// an 8B-like width, and a shape left to the unfused default (6 x 20).
TEST(GpuFp8, SwigluBlockCastIsTheUnfusedBits) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  for (DType act : {DType::BF16, DType::F16, DType::F32})
    for (DType fp8 : {DType::E4M3, DType::E5M2})
      for (auto [R, F] : {std::pair<int64_t, int64_t>{128, 128}, {136, 264}, {256, 200}, {8192 / 16, 14336 / 16},
                          {6, 20}})
        EXPECT_EQ(fp8_swiglu_cast_mismatch(cuda(), act, fp8, R, F, 19, true), "")
            << dtype_name(act) << " " << dtype_name(fp8) << " R=" << R << " F=" << F;
}

INSTANTIATE_TEST_SUITE_P(
    All, GpuOps,
    ::testing::Combine(::testing::Range(0, static_cast<int>(all_cases().size())),
                       ::testing::Values(DType::F32, DType::BF16, DType::F16)),
    [](const ::testing::TestParamInfo<std::tuple<int, DType>>& p) {
      return all_cases()[static_cast<size_t>(std::get<0>(p.param))].name + "_" +
             dtype_name(std::get<1>(p.param));
    });

}  // namespace
}  // namespace tripod::testing
