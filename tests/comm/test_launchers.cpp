// 8 CPU ranks through each launcher users have (tripod launch, torchrun,
// mpirun): every collective on every group of a TP2 x PP2 x DP2 layout,
// checked against analytic values by `tripod bench comm --check`; the file
// store in place of TCP; launch's prefixes and exit codes; bench comm's table.
#include <gtest/gtest.h>

#include <sstream>

#include "proc_util.h"

using namespace tripod::testing;

static const std::string kLayout =
    " bench comm --check --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2";

TEST(Launchers, TripodLaunch8RanksAllSizes) {
  // Default sizes: 1, 2, 3, 7, 64, 1023, 4097, 65539, 1500001 elements (~6 MB).
  auto r = run_shell(tripod_bin() + " launch --nproc-per-node 8" + kLayout, 120);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "[rank 0] comm check passed: world 8 = tp 2 x dp 2 x pp 2")) << r.output;
  EXPECT_TRUE(contains(r.output, "launcher tripod, 6 groups per rank, 378 ops per rank")) << r.output;
}

TEST(Launchers, Torchrun8Ranks) {
  if (::access("/usr/bin/torchrun", X_OK) != 0) GTEST_SKIP() << "torchrun (python3-torch) not installed";
  // Debian's torchrun on Python 3.11 crashes with the default --redirects 0;
  // non-zero values work (see docs/distributed.md).
  auto r = run_shell("cd " + temp_dir("torchrun") +
                         " && /usr/bin/torchrun --standalone --nproc_per_node 8 --redirects 1 --tee 1 "
                         "--no_python " + tripod_bin() + kLayout + " --check-sizes 1 3 1000 65539 300007",
                     120);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "comm check passed: world 8 = tp 2 x dp 2 x pp 2")) << r.output;
  EXPECT_TRUE(contains(r.output, "launcher torchrun")) << r.output;
}

TEST(Launchers, Mpirun8Ranks) {
  if (::access("/usr/bin/mpirun", X_OK) != 0) GTEST_SKIP() << "mpirun (openmpi-bin) not installed";
  auto r = run_shell("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                     "OMPI_MCA_rmaps_base_oversubscribe=1 /usr/bin/mpirun -np 8 " +
                         tripod_bin() + kLayout + " --check-sizes 1 3 1000 65539 300007",
                     120);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "comm check passed: world 8 = tp 2 x dp 2 x pp 2")) << r.output;
  EXPECT_TRUE(contains(r.output, "launcher mpi")) << r.output;
}

TEST(Launchers, LaunchPrefixesOutputAndPassesExitCodes) {
  // `tripod --version` prints one line per rank; an unknown subcommand fails.
  auto r = run_shell(tripod_bin() + " launch --nproc-per-node 3 --version", 30);
  EXPECT_EQ(r.code, 0) << r.output;
  for (int k = 0; k < 3; ++k) EXPECT_TRUE(contains(r.output, "[rank " + std::to_string(k) + "] tripod ")) << r.output;
  r = run_shell(tripod_bin() + " launch --nproc-per-node 2 no-such-command", 30);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "tripod launch: rank ")) << r.output;
  EXPECT_TRUE(contains(r.output, "exited with code 1")) << r.output;
}

TEST(Launchers, FileStoreInsteadOfTcp) {
  const std::string dir = temp_dir("filestore");
  auto r = run_shell("TRIPOD_INIT_METHOD=file://" + dir + "/store " + tripod_bin() +
                         " launch --nproc-per-node 4 bench comm --check --pipeline-model-parallel-size 2 "
                         "--check-sizes 1 1000",
                     60);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "joined at file://" + dir + "/store")) << r.output;
  EXPECT_TRUE(contains(r.output, "comm check passed: world 4 = tp 1 x dp 2 x pp 2")) << r.output;
}

// bench comm's table: the data check passes and the bandwidth columns follow
// nccl-tests' definitions (algbw = size / time; busbw = algbw x factor).
TEST(Launchers, BenchCommColumnsFollowNcclTestsDefinitions) {
  auto r = run_shell(tripod_bin() + " launch --nproc-per-node 3 bench comm --min-bytes 1200000 "
                     "--max-bytes 1200000 --iters 2 --warmup-iters 1", 120);
  ASSERT_EQ(r.code, 0) << r.output;
  std::istringstream lines(r.output);
  std::string line;
  int rows = 0;
  const double n = 3;
  while (std::getline(lines, line)) {
    if (line.rfind("[rank 0]  ", 0) != 0) continue;
    std::istringstream f(line.substr(9));
    long long size = 0, count = 0, wrong = -1;
    std::string op;
    double us = 0, algbw = 0, busbw = 0;
    if (!(f >> size >> count >> op >> us >> algbw >> busbw >> wrong)) continue;
    ++rows;
    EXPECT_EQ(wrong, 0) << line;
    EXPECT_EQ(size, count * 4) << line;
    EXPECT_NEAR(algbw, double(size) / (us * 1e3), 2e-4 + 0.01 * algbw) << line;
    const double factor = op == "all_reduce" ? 2 * (n - 1) / n
                          : (op == "all_gather" || op == "reduce_scatter") ? (n - 1) / n : 1.0;
    EXPECT_NEAR(busbw, algbw * factor, 2e-4 + 0.01 * busbw) << line;
  }
  EXPECT_EQ(rows, 5) << r.output;  // one size x five ops
}
