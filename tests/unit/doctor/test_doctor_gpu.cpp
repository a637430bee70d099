// The GPU paths of the doctor checks on a real GPU machine (CUDA builds,
// label gpu): the CUDA runtime inventory, driver vs runtime version, NCCL
// version, and `nvidia-smi topo -m` parsed for as many GPUs as the runtime
// sees. Prints every local check's line, as `tripod doctor` would.
#include <gtest/gtest.h>

#include <cstdio>

#include "doctor/checks.h"

namespace tripod::doctor {
namespace {

TEST(DoctorGpu, RealDevices) {
  const CudaInventory inv = gather_cuda_inventory();
  ASSERT_TRUE(inv.built_with_cuda);
  for (const auto& c : run_local_checks({}))
    std::printf("[%s] %-20s %s%s%s\n", to_string(c.status), c.name.c_str(), c.finding.c_str(),
                c.fix.empty() ? "" : " | fix: ", c.fix.c_str());
  if (inv.gpus.empty()) GTEST_SKIP() << "no GPU: " << inv.error;
  EXPECT_GT(inv.runtime_version, 0);
  EXPECT_GT(inv.driver_version, 0);
  EXPECT_GT(inv.nccl_version, 0);
  for (const auto& g : inv.gpus) {
    EXPECT_FALSE(g.name.empty());
    EXPECT_GT(g.memory_bytes, int64_t(1) << 30);
    EXPECT_GE(g.major, 7);
  }
  const CheckResult gpus = check_gpus(inv);
  EXPECT_NE(gpus.status, Status::kFail);
  EXPECT_NE(gpus.finding.find(inv.gpus[0].name), std::string::npos);
  // The driver runs this binary's kernels-free runtime calls, so it supports
  // the runtime: the version check must agree.
  EXPECT_EQ(check_cuda_versions(inv).status, inv.driver_version >= inv.runtime_version ? Status::kPass : Status::kFail);
  FILE* p = ::popen("nvidia-smi topo -m 2>/dev/null", "r");
  ASSERT_NE(p, nullptr);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) text.append(buf, n);
  const int rc = ::pclose(p);
  if (rc != 0 || text.empty()) GTEST_SKIP() << "nvidia-smi topo -m not available";
  std::printf("%s\n", text.c_str());
  const auto topo = parse_topology(text);
  ASSERT_TRUE(topo.has_value()) << text;
  EXPECT_EQ(topo->num_gpus, int(inv.gpus.size()));
}

}  // namespace
}  // namespace tripod::doctor
