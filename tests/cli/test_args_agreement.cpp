// NOTE [Args agreement] in train/args_agreement.h, through `tripod train`:
// two ranks launched by hand (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, as
// torchrun sets them) with a different --num-attention-heads, or a different
// --lr, both stop with the same message naming the flag, the ranks and the
// values; ranks that differ only in --metrics-file train.
#include <gtest/gtest.h>

#include "comm/proc_util.h"

using namespace tripod::testing;

namespace {

const std::string kModel =
    " train --num-layers 2 --hidden-size 64 --seq-length 16 --mock-data --vocab-size 128 --micro-batch-size 2 "
    "--global-batch-size 4 --train-iters 2 --log-interval 1 --eval-interval 0 --distributed-timeout-minutes 0.5";

// Rank k runs kModel + rank_args[k]; output in dir/r<k>.log, exit code in dir/r<k>.code.
RunResult two_ranks(const std::string& dir, const std::vector<std::string>& rank_args) {
  const int port = free_port();
  std::string cmd;
  for (int k = 0; k < 2; ++k)
    cmd += "(RANK=" + std::to_string(k) + " WORLD_SIZE=2 LOCAL_RANK=" + std::to_string(k) +
           " LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) + " " + tripod_bin() +
           kModel + " " + rank_args[static_cast<size_t>(k)] + " > " + dir + "/r" + std::to_string(k) +
           ".log 2>&1; echo $? > " + dir + "/r" + std::to_string(k) + ".code) & ";
  return run_shell(cmd + "wait", 120);
}

int code_of(const std::string& dir, int k) {
  return std::atoi(read_file(dir + "/r" + std::to_string(k) + ".code").c_str());
}

void expect_both_stop_with(const std::string& dir, const std::string& message) {
  for (int k = 0; k < 2; ++k) {
    const std::string log = read_file(dir + "/r" + std::to_string(k) + ".log");
    EXPECT_NE(code_of(dir, k), 0) << log;
    EXPECT_TRUE(contains(log, "the ranks were started with different flags: " + message)) << log;
    EXPECT_FALSE(contains(log, "terminate called")) << log;
    EXPECT_FALSE(contains(log, "iteration        1")) << log;  // stopped before training
  }
}

TEST(ArgsAgreement, DifferentHeadsStopEveryRankNamingTheFlag) {
  const std::string dir = temp_dir("args_heads");
  auto r = two_ranks(dir, {"--num-attention-heads 4", "--num-attention-heads 8"});
  ASSERT_FALSE(r.timed_out) << r.output;
  expect_both_stop_with(dir, "rank 1 has --num-attention-heads 8, rank 0 has 4");
}

TEST(ArgsAgreement, DifferentLrStopsEveryRank) {
  const std::string dir = temp_dir("args_lr");
  auto r = two_ranks(dir, {"--num-attention-heads 4 --lr 1e-3", "--num-attention-heads 4 --lr 2e-3"});
  ASSERT_FALSE(r.timed_out) << r.output;
  expect_both_stop_with(dir, "rank 1 has --lr 0.002, rank 0 has 0.001");
}

TEST(ArgsAgreement, PerRankMetricsFilesAreAllowed) {
  const std::string dir = temp_dir("args_same");
  auto r = two_ranks(dir, {"--num-attention-heads 4 --metrics-file " + dir + "/m0.jsonl",
                           "--num-attention-heads 4 --metrics-file " + dir + "/m1.jsonl"});
  ASSERT_FALSE(r.timed_out) << r.output;
  for (int k = 0; k < 2; ++k) EXPECT_EQ(code_of(dir, k), 0) << read_file(dir + "/r" + std::to_string(k) + ".log");
  const std::string last = read_file(dir + "/r1.log");  // the last rank logs the iterations
  EXPECT_TRUE(contains(last, "iteration        2/       2")) << last;
}

}  // namespace
