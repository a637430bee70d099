// backend_ops on the CPU backend: every case in f32 against the same backend
// in f64. Checks the f32 path of the reference itself and keeps the harness
// exercised on machines without a GPU (label backend_ops).
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tripod::testing
