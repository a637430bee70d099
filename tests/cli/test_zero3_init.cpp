// ZeRO-3's sharded initialization through `tripod train` (NOTE [Sharded
// init] in distributed/param_and_grad_buffer.cpp): each rank draws the
// initial parameters one at a time and keeps its shard, so start-up never
// holds the whole model. Four CPU ranks capped at 270 MiB each train a 51M-
// parameter model under optim_grads_params (whole f32 values at start-up,
// 194 MiB, next to the shards took the peak to 292 MiB before; the step
// itself peaks near 251 MiB), with the same losses as the distributed
// optimizer's uncapped run: the same initial values.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "testing/run_tripod.h"

namespace {

using tripod::testing::run_tripod;

const std::string kRun =
    "launch --nproc-per-node 4 -- train --num-layers 16 --hidden-size 512 --num-attention-heads 8 --seq-length 32 "
    "--max-position-embeddings 32 --vocab-size 1024 --mock-data --micro-batch-size 1 --global-batch-size 4 "
    "--train-iters 2 --log-interval 1 --eval-interval 0 ";

std::vector<std::string> losses(const std::string& out) {
  std::vector<std::string> v;
  const std::string key = "lm loss: ";
  for (size_t at = out.find(key); at != std::string::npos; at = out.find(key, at + 1))
    v.push_back(out.substr(at + key.size(), 12));
  return v;
}

TEST(Zero3Init, StartsWithinACapTheWholeModelWouldExceed) {
  auto capped = run_tripod(kRun + "--data-parallel-sharding-strategy optim_grads_params", "TRIPOD_CPU_MEMORY_LIMIT_MB=270");
  ASSERT_EQ(capped.code, 0) << capped.output;
  auto reference = run_tripod(kRun + "--use-distributed-optimizer");
  ASSERT_EQ(reference.code, 0) << reference.output;
  EXPECT_EQ(losses(capped.output).size(), 2u) << capped.output;
  EXPECT_EQ(losses(capped.output), losses(reference.output));
}

}  // namespace
