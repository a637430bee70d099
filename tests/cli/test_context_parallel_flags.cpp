// --context-parallel-size and --cp-comm-type through `tripod train` and
// `tripod launch`: what context parallelism refuses stops the run before
// any work with a message naming the flags and the fix; a good job logs its
// layout in Megatron's tp-cp-dp-pp order.
#include <gtest/gtest.h>

#include <string>

#include "testing/run_tripod.h"

namespace {

using tripod::testing::run_tripod;

const std::string kModel =
    "--device cpu --num-layers 2 --hidden-size 32 --num-attention-heads 4 --mock-data --vocab-size 100 "
    "--micro-batch-size 1 --global-batch-size 2 --train-iters 1 --log-interval 1 --eval-interval 0 ";

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

void expect_error(const std::string& cmd, const std::vector<std::string>& parts) {
  const auto r = run_tripod(cmd);
  EXPECT_NE(r.code, 0) << cmd << "\n" << r.output;
  for (const auto& p : parts) EXPECT_TRUE(has(r.output, p)) << cmd << ": no '" << p << "' in\n" << r.output;
}

TEST(ContextParallelFlags, RefusalsNameTheFlags) {
  // One process cannot hold a cp group of 2.
  expect_error("train " + kModel + "--seq-length 16 --context-parallel-size 2",
               {"--context-parallel-size 2", "world size 1"});
  // 2 x CP chunks of a sequence.
  expect_error("launch --nproc-per-node 2 train " + kModel + "--seq-length 18 --context-parallel-size 2",
               {"--seq-length 18", "--context-parallel-size 2", "multiple of 2 x --context-parallel-size = 4"});
  // The hierarchical form is not in tripod; unknown names list the known ones.
  expect_error("train " + kModel + "--seq-length 16 --cp-comm-type a2a+p2p",
               {"--cp-comm-type a2a+p2p", "not yet in tripod", "--cp-comm-type a2a"});
  expect_error("train " + kModel + "--seq-length 16 --cp-comm-type ring",
               {"unknown --cp-comm-type 'ring'", "p2p, all_gather or a2a"});
  // Megatron's list form: one per layer (2 here), or one for all.
  expect_error("train " + kModel + "--seq-length 16 --cp-comm-type p2p a2a a2a",
               {"--cp-comm-type has 3 values for --num-layers 2"});
  // a2a splits each tensor-parallel rank's heads over cp: 4 heads / tp 1 at cp 4 is fine,
  // 4 heads / tp 2 at cp 4 is not.
  expect_error("launch --nproc-per-node 8 train " + kModel +
                   "--seq-length 16 --tensor-model-parallel-size 2 --context-parallel-size 4 --cp-comm-type a2a",
               {"2 query heads and 2 K/V heads per rank", "--context-parallel-size 4", "--cp-comm-type p2p"});
}

TEST(ContextParallelFlags, PerLayerCommTypesRun) {
  // One layer exchanging heads, the other on the ring: both in one run.
  const auto r = run_tripod("launch --nproc-per-node 2 train " + kModel +
                            "--seq-length 16 --context-parallel-size 2 --cp-comm-type a2a p2p");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "world 2 = tp 1 x cp 2 x dp 1 x pp 1")) << r.output;
}

TEST(ContextParallelFlags, LayoutIsTpCpDpPp) {
  const auto r = run_tripod("launch --nproc-per-node 4 train " + kModel +
                            "--seq-length 16 --context-parallel-size 2 --global-batch-size 4");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "world 4 = tp 1 x cp 2 x dp 2 x pp 1")) << r.output;
  EXPECT_TRUE(has(r.output, "gradient buckets (dp 2 x cp 2")) << r.output;
}

}  // namespace
