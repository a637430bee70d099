// backend_ops on the CPU backend: every case in f32 against the same backend
// in f64. Checks the f32 path of the reference itself and keeps the harness
// exercised on machines without a GPU (label backend_ops).
#include <gtest/gtest.h>

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

// adamw_update with a compute_out writes what adamw_update then cast() do
// (the CPU backend's composed default; the trainer relies on it).
TEST(CpuAdamW, ComputeOutIsTheUnfusedBits) {
  auto be = backend::make_cpu_backend();
  for (DType dt : {DType::BF16, DType::F16, DType::F32})
    for (auto [n, offset] : {std::pair<int64_t, int64_t>{4096, 0}, {3001, 1}})
      EXPECT_EQ(adamw_compute_out_mismatch(*be, dt, n, offset, 11), "")
          << dtype_name(dt) << " n=" << n << " offset=" << offset;
}

}  // namespace
}  // namespace tripod::testing
