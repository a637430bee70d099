// IPC collectives through the real executable ($TRIPOD_BIN): CPU ranks on one
// host run their collectives through shared memory (NOTE [IPC collectives])
// by default; TRIPOD_IPC_COLLECTIVES=0 keeps them on Gloo.
//  - `bench comm --check` verifies every collective on every group of a
//    TP2 x PP2 world against analytic values, and says it used IPC;
//  - a TP2 training run (every group has 2 ranks, so the sums are the same
//    sums) gives the same losses and gradient norms as over Gloo, bit for
//    bit; a TP2 x DP2 run with the distributed optimizer (the grad norm is
//    summed over 4 ranks, in another order than Gloo's ring) within 1e-6.
// The same communicator serves ranks that share one GPU
// (scripts/gpu_ipc_check.sh checks that on a GPU).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "testing/run_tripod.h"

namespace {

namespace fs = std::filesystem;
using tripod::testing::run_tripod;

std::vector<nlohmann::json> train_rows(const fs::path& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("lm_loss") && j.contains("grad_norm")) out.push_back(j);
  }
  return out;
}

TEST(IpcCollectives, BenchCommCheckPassesOverSharedMemory) {
  auto r = run_tripod("launch --nproc-per-node 4 -- bench comm --check --tensor-model-parallel-size 2 "
                      "--pipeline-model-parallel-size 2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("comm check passed"), std::string::npos) << r.output;
  auto bench = run_tripod("launch --nproc-per-node 2 -- bench comm --ops all_reduce --max-bytes 4096 --iters 2");
  ASSERT_EQ(bench.code, 0) << bench.output;
  EXPECT_NE(bench.output.find("(collectives through shared memory: IPC)"), std::string::npos) << bench.output;
  EXPECT_NE(bench.output.find("Gloo communicators; collectives through shared memory, TRIPOD_IPC_COLLECTIVES=0 for "
                              "Gloo only)"),
            std::string::npos)
      << bench.output;
  auto plain = run_tripod("launch --nproc-per-node 2 -- bench comm --ops all_reduce --max-bytes 4096 --iters 2",
                          "TRIPOD_IPC_COLLECTIVES=0");
  ASSERT_EQ(plain.code, 0) << plain.output;
  EXPECT_EQ(plain.output.find("IPC"), std::string::npos) << plain.output;
  EXPECT_EQ(plain.output.find("shared memory"), std::string::npos) << plain.output;
}

// Ranks that disagree on a collective's size fail at once, both naming the
// collective, the group and both sizes (as the Gloo path's
// Faults.SizeMismatchInACollectiveIsATripodErrorNotAnAbort).
TEST(IpcCollectives, SizeMismatchNamesBothSides) {
  auto r = run_tripod("launch --nproc-per-node 2 -- bench comm --ops all_reduce --min-bytes 4096 --max-bytes 4096 "
                      "--iters 1 --warmup-iters 0 --fault-size-mismatch-rank 1 --distributed-timeout-minutes 0.5");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
  // Whichever rank reports first (the launcher then stops the other).
  const bool rank0 = r.output.find("global rank 0: all_reduce #1 on group world [0, 1] (4096 bytes): global rank 1 "
                                   "called all_reduce #1 with 8192 bytes where this rank called all_reduce with 4096 "
                                   "bytes") != std::string::npos;
  const bool rank1 = r.output.find("global rank 1: all_reduce #1 on group world [0, 1] (8192 bytes): global rank 0 "
                                   "called all_reduce #1 with 4096 bytes where this rank called all_reduce with 8192 "
                                   "bytes") != std::string::npos;
  EXPECT_TRUE(rank0 || rank1) << r.output;
  EXPECT_NE(r.output.find("start every rank with the same flags"), std::string::npos) << r.output;
}

void compare_training(const std::string& name, int ranks, const std::string& flags, double rel_tol) {
  const fs::path dir = fs::temp_directory_path() / ("tripod_ipc_" + name + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string base =
      "launch --nproc-per-node " + std::to_string(ranks) + " -- train " + flags + " --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 "
      "--vocab-size 128 --mock-data --micro-batch-size 2 --global-batch-size 8 --lr 1e-3 --train-iters 4 "
      "--log-interval 1 --eval-iters 0 --device cpu --tensor-model-parallel-size 2 --sequence-parallel "
      "--metrics-file ";
  auto gloo = run_tripod(base + (dir / "gloo.jsonl").string(), "TRIPOD_IPC_COLLECTIVES=0");
  ASSERT_EQ(gloo.code, 0) << gloo.output;
  auto ipc = run_tripod(base + (dir / "ipc.jsonl").string());
  ASSERT_EQ(ipc.code, 0) << ipc.output;
  const auto g = train_rows(dir / "gloo.jsonl"), i = train_rows(dir / "ipc.jsonl");
  ASSERT_EQ(g.size(), 4u);
  ASSERT_EQ(i.size(), 4u);
  for (size_t k = 0; k < 4; ++k)
    for (const char* key : {"lm_loss", "grad_norm"}) {
      const double a = i[k][key].get<double>(), b = g[k][key].get<double>();
      if (rel_tol == 0) EXPECT_EQ(a, b) << key << " at iteration " << k + 1;
      else EXPECT_NEAR(a, b, rel_tol * std::abs(b)) << key << " at iteration " << k + 1;
    }
  EXPECT_NE(g[3]["lm_loss"].get<double>(), g[0]["lm_loss"].get<double>());  // it trained
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

TEST(IpcCollectives, Tp2TrainingMatchesGlooBitForBit) {
  compare_training("tp2", 2, "", 0);
}

TEST(IpcCollectives, Tp2Dp2DistributedOptimizerMatchesGloo) {
  compare_training("tp2dp2", 4, "--use-distributed-optimizer", 1e-6);
}

}  // namespace
