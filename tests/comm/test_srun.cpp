// 8 CPU ranks through srun on a one-node Slurm cluster that the test starts
// and stops itself (slurm_one_node.sh): every collective on every group of
// TP2 x PP2 x DP2. Label slow: it starts daemons and needs root.
#include <gtest/gtest.h>

#include "proc_util.h"

using namespace tripod::testing;

TEST(Launchers, Srun8Ranks) {
  const char* src = std::getenv("TRIPOD_SOURCE_DIR");
  ASSERT_TRUE(src);
  if (::geteuid() != 0) GTEST_SKIP() << "starting slurmd needs root";
  auto r = run_shell(std::string(src) + "/tests/comm/slurm_one_node.sh 8 " + tripod_bin() +
                         " bench comm --check --tensor-model-parallel-size 2 "
                         "--pipeline-model-parallel-size 2 --check-sizes 1 3 1000 65539 300007",
                     180);
  if (r.code == 77) GTEST_SKIP() << r.output;
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "comm check passed: world 8 = tp 2 x dp 2 x pp 2")) << r.output;
  EXPECT_TRUE(contains(r.output, "launcher slurm")) << r.output;
}
