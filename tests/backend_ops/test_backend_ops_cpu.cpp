// backend_ops on the CPU backend: every case in f32 against the same backend
// in f64. Checks the f32 path of the reference itself and keeps the harness
// exercised on machines without a GPU (label backend_ops).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <tuple>
#include <utility>

#include "backend/cpu/cpu_backend.h"
#include "harness.h"

namespace tripod::testing {
namespace {

class CpuOps : public ::testing::TestWithParam<int> {};

TEST_P(CpuOps, MatchesFloat64) {
  const OpCase& c = all_cases()[static_cast<size_t>(GetParam())];
  auto target = backend::make_cpu_backend();
  auto ref = backend::make_cpu_backend();
  CaseResult r = run_case(c, *target, DType::F32, *ref, 1000 + GetParam());
  std::printf("[cpu f32] %s\n%s", c.name.c_str(), r.summary.c_str());
  EXPECT_TRUE(r.ok) << c.name << "\n" << r.summary << r.detail;
}

INSTANTIATE_TEST_SUITE_P(All, CpuOps,
                         ::testing::Range(0, static_cast<int>(all_cases().size())),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return all_cases()[static_cast<size_t>(p.param)].name;
                         });

// The bf16/f16 emulation (backend/cpu/half.h) against the same f64
// reference, with the tolerances the CUDA backend meets in those dtypes.
class CpuHalfOps : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(CpuHalfOps, MatchesFloat64) {
  auto [index, dt] = GetParam();
  const OpCase& c = all_cases()[static_cast<size_t>(index)];
  if (c.f32_only) GTEST_SKIP() << c.name << " runs on f32 state only";
  auto target = backend::make_cpu_backend();
  auto ref = backend::make_cpu_backend();
  CaseResult r = run_case(c, *target, dt, *ref, 5000 + 31 * index + static_cast<int>(dt));
  std::printf("[cpu %s] %s\n%s", dtype_name(dt), c.name.c_str(), r.summary.c_str());
  EXPECT_TRUE(r.ok) << c.name << " " << dtype_name(dt) << "\n" << r.summary << r.detail;
}

INSTANTIATE_TEST_SUITE_P(
    All, CpuHalfOps,
    ::testing::Combine(::testing::Range(0, static_cast<int>(all_cases().size())),
                       ::testing::Values(DType::BF16, DType::F16)),
    [](const ::testing::TestParamInfo<std::tuple<int, DType>>& p) {
      return all_cases()[static_cast<size_t>(std::get<0>(p.param))].name + "_" +
             dtype_name(std::get<1>(p.param));
    });

// adamw_update with a compute_out writes what adamw_update then cast() do
// (the CPU backend's composed default; the trainer relies on it).
TEST(CpuAdamW, ComputeOutIsTheUnfusedBits) {
  auto be = backend::make_cpu_backend();
  for (DType dt : {DType::BF16, DType::F16, DType::F32})
    for (auto [n, offset] : {std::pair<int64_t, int64_t>{4096, 0}, {3001, 1}})
      EXPECT_EQ(adamw_compute_out_mismatch(*be, dt, n, offset, 11), "")
          << dtype_name(dt) << " n=" << n << " offset=" << offset;
}

// The SwiGLU casts write what swiglu_* then fp8_cast_transpose write, bit
// for bit: the kernel's shapes (R, F multiples of 8: whole and cut tiles,
// an 8B-like width) and one it leaves to the unfused default (6 x 20).
TEST(CpuFp8, SwigluCastIsTheUnfusedBits) {
  auto be = backend::make_cpu_backend();
  for (DType act : {DType::BF16, DType::F16, DType::F32})
    for (DType fp8 : {DType::E4M3, DType::E5M2})
      for (auto [R, F] : {std::pair<int64_t, int64_t>{16, 24}, {6, 20}})
        EXPECT_EQ(fp8_swiglu_cast_mismatch(*be, act, fp8, R, F, 17), "")
            << dtype_name(act) << " " << dtype_name(fp8) << " R=" << R << " F=" << F;
}

// And block scaling's SwiGLU casts (the CPU's is the composed default:
// this checks the op's wiring and its validation against fp8_block_cast).
TEST(CpuFp8, SwigluBlockCastIsTheUnfusedBits) {
  auto be = backend::make_cpu_backend();
  for (DType act : {DType::BF16, DType::F32})
    for (DType fp8 : {DType::E4M3, DType::E5M2})
      for (auto [R, F] : {std::pair<int64_t, int64_t>{136, 200}, {6, 20}})
        EXPECT_EQ(fp8_swiglu_cast_mismatch(*be, act, fp8, R, F, 19, true), "")
            << dtype_name(act) << " " << dtype_name(fp8) << " R=" << R << " F=" << F;
}

// Block scaling's casts on values worked by hand (E4M3): in (2, 130), so
// each row has a whole and a 2-wide 1x128 block, each column one 2-row block,
// and the tiles are (0, 0) and the 2-wide (0, 1).
//   row 0: 3.5, -1.75, 0.1, 0... | 5, -2.5
//   row 1: NaN, 0...             | inf, 1
TEST(CpuFp8, BlockCastHandValues) {
  auto be = backend::make_cpu_backend();
  const int64_t R = 2, C = 130;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  Tensor in = be->empty({R, C}, DType::F32);
  float* x = in.data<float>();
  std::fill(x, x + R * C, 0.f);
  x[0] = 3.5f, x[1] = -1.75f, x[2] = 0.1f, x[128] = 5.f, x[129] = -2.5f;
  x[C] = nan, x[C + 128] = inf, x[C + 129] = 1.f;
  auto code = [](const Tensor& t, int64_t i) { return static_cast<const uint8_t*>(t.raw())[i]; };

  Tensor out = be->empty({R, C}, DType::E4M3), out_t = be->empty({C, R}, DType::E4M3);
  Tensor s = be->empty({2 * R}, DType::F32), s_t = be->empty({1 * C}, DType::F32);
  be->fp8_block_cast(out, s, &out_t, &s_t, in);
  // Rows. Block (0, 0): amax 3.5, scale 448 / 3.5 = 128: 448 -> 0x7e, -224 -> 0xf6, 12.8 -> 13 (0x55).
  // Block (0, 1): amax 5, 448 / 5 = 89.6 -> 64: 320 -> 0x7a, -160 -> 0xf2. Block (1, 0): amax 0 (NaN
  // skipped), scale 1: NaN -> 0x7f. Block (1, 1): amax inf, scale 1: inf saturates (0x7e), 1 -> 0x38.
  // scale_inv [block][row].
  EXPECT_EQ(code(out, 0), 0x7e);
  EXPECT_EQ(code(out, 1), 0xf6);
  EXPECT_EQ(code(out, 2), 0x55);
  EXPECT_EQ(code(out, 3), 0x00);
  EXPECT_EQ(code(out, 128), 0x7a);
  EXPECT_EQ(code(out, 129), 0xf2);
  EXPECT_EQ(code(out, C), 0x7f);
  EXPECT_EQ(code(out, C + 1), 0x00);
  EXPECT_EQ(code(out, C + 128), 0x7e);
  EXPECT_EQ(code(out, C + 129), 0x38);
  const float* si = s.data<float>();
  EXPECT_EQ(si[0], 1.f / 128);
  EXPECT_EQ(si[1], 1.f);
  EXPECT_EQ(si[2], 1.f / 64);
  EXPECT_EQ(si[3], 1.f);
  // Columns (out_t (C, R), one block each). Column 0 {3.5, NaN}: scale 128. Column 1 {-1.75, 0}:
  // 448 / 1.75 = 256: -448 -> 0xfe. Column 2 {0.1, 0}: 4480 -> 4096: 409.6 -> 416 (0x7d).
  // Column 3 {0, 0}: scale 1. Column 128 {5, inf}: scale 1: 5 -> 0x4a, inf -> 0x7e. Column 129
  // {-2.5, 1}: 179.2 -> 128: -320 -> 0xfa, 128 -> 0x70.
  const uint8_t want_t[][2] = {{0x7e, 0x7f}, {0xfe, 0x00}, {0x7d, 0x00}, {0x00, 0x00}};
  for (int c = 0; c < 4; ++c)
    for (int r = 0; r < 2; ++r) EXPECT_EQ(code(out_t, c * R + r), want_t[c][r]) << "column " << c << " row " << r;
  EXPECT_EQ(code(out_t, 128 * R), 0x4a);
  EXPECT_EQ(code(out_t, 128 * R + 1), 0x7e);
  EXPECT_EQ(code(out_t, 129 * R), 0xfa);
  EXPECT_EQ(code(out_t, 129 * R + 1), 0x70);
  const float* st = s_t.data<float>();
  EXPECT_EQ(st[0], 1.f / 128);
  EXPECT_EQ(st[1], 1.f / 256);
  EXPECT_EQ(st[2], 1.f / 4096);
  EXPECT_EQ(st[3], 1.f);
  EXPECT_EQ(st[128], 1.f);
  EXPECT_EQ(st[129], 1.f / 128);

  // Tiles: (0, 0) amax 3.5 (scale 128, codes as row 0's block 0; NaN -> 0x7f), (0, 1) amax inf
  // (scale 1: 5 -> 0x4a, -2.5 -> 0xc2, inf -> 0x7e, 1 -> 0x38); out_t the same codes transposed;
  // scale_inv (1, ld 4) and scale_inv_t (2, ld 4), the padding 1.
  Tensor tt = be->empty({R, C}, DType::E4M3), tt_t = be->empty({C, R}, DType::E4M3);
  Tensor ts = be->empty({4}, DType::F32), ts_t = be->empty({8}, DType::F32);
  be->fp8_block_cast_tiles(tt, tt_t, ts, ts_t, in);
  const std::pair<int64_t, uint8_t> want_tiles[] = {{0, 0x7e},     {1, 0xf6},       {2, 0x55},       {C, 0x7f},
                                                    {128, 0x4a},   {129, 0xc2},     {C + 128, 0x7e}, {C + 129, 0x38}};
  for (auto [i, c] : want_tiles) {
    EXPECT_EQ(code(tt, i), c) << "element " << i;
    EXPECT_EQ(code(tt_t, (i % C) * R + i / C), c) << "element " << i << " transposed";
  }
  const float want_ts[] = {1.f / 128, 1.f, 1.f, 1.f}, want_ts_t[] = {1.f / 128, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(ts.data<float>()[i], want_ts[i]) << i;
  for (int i = 0; i < 8; ++i) EXPECT_EQ(ts_t.data<float>()[i], want_ts_t[i]) << i;
}

}  // namespace
}  // namespace tripod::testing
