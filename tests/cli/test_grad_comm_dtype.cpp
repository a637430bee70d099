// The dtype of the data-parallel gradient reduction through `tripod train`
// (NOTE [bf16 gradient communication]): --grad-reduce-in-bf16 at dp2 moves
// bf16, so the losses leave the fp32 reduction's (after the first step) but
// stay within 1e-4 of them; the no_shard all-reduce and the distributed
// optimizer's reduce-scatter make the same sums, so they agree bit for bit;
// ZeRO-3 trains with it; Megatron-FSDP's "auto" chain under --bf16 gives the
// same run as --grad-reduce-in-bf16; the values tripod cannot do are
// refused naming the flag.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "testing/run_tripod.h"

namespace {

using tripod::testing::run_tripod;

const std::string kRun =
    "launch --nproc-per-node 2 -- train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
    "--max-position-embeddings 32 --vocab-size 128 --mock-data --micro-batch-size 2 --global-batch-size 8 "
    "--train-iters 5 --log-interval 1 --eval-interval 0 --lr 1e-3 ";

std::vector<double> losses(const std::string& out) {
  std::vector<double> v;
  const std::string key = "lm loss: ";
  for (size_t at = out.find(key); at != std::string::npos; at = out.find(key, at + 1))
    v.push_back(std::stod(out.substr(at + key.size(), 12)));
  return v;
}

std::vector<double> run_ok(const std::string& flags) {
  auto r = run_tripod(kRun + flags);
  EXPECT_EQ(r.code, 0) << r.output;
  const auto v = losses(r.output);
  EXPECT_EQ(v.size(), 5u) << r.output;
  return v;
}

TEST(GradCommDtype, Bf16ReductionStaysCloseAndTheSameSumsAgree) {
  const auto fp32 = run_ok("");
  const auto plain = run_ok("--grad-reduce-in-bf16");
  const auto sharded = run_ok("--grad-reduce-in-bf16 --use-distributed-optimizer");
  const auto zero3 = run_ok("--grad-reduce-in-bf16 --data-parallel-sharding-strategy optim_grads_params");
  ASSERT_EQ(fp32.size(), 5u);
  ASSERT_EQ(plain.size(), 5u);
  bool differs = false;
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_NEAR(plain[i], fp32[i], 1e-4 * fp32[i]) << "iteration " << i + 1;
    differs |= plain[i] != fp32[i];
    EXPECT_EQ(sharded[i], plain[i]) << "iteration " << i + 1;
    EXPECT_NEAR(zero3[i], fp32[i], 1e-4 * fp32[i]) << "iteration " << i + 1;
  }
  EXPECT_TRUE(differs) << "the bf16 reduction left every loss as the fp32 one's";
  auto r = run_tripod(kRun + "--grad-reduce-in-bf16");
  EXPECT_NE(r.output.find("reduced in bf16 (accumulated in fp32)"), std::string::npos) << r.output;
}

TEST(GradCommDtype, MegatronFsdpAutoChainUnderBf16IsBf16) {
  const auto flag = run_ok("--bf16 --grad-reduce-in-bf16");
  const auto chain = run_ok("--bf16 --megatron-fsdp-grad-comm-dtype auto --megatron-fsdp-main-grads-dtype auto "
                            "--megatron-fsdp-main-params-dtype fp32 --outer-dp-sharding-strategy no_shard");
  const auto fp32 = run_ok("--bf16 --megatron-fsdp-grad-comm-dtype fp32");
  EXPECT_EQ(chain, flag);
  EXPECT_NE(fp32, flag);
}

TEST(GradCommDtype, WhatTripodCannotDoIsRefused) {
  auto r = run_tripod(kRun + "--bf16 --megatron-fsdp-main-params-dtype auto");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--megatron-fsdp-main-params-dtype auto asks for bf16 main parameters"), std::string::npos)
      << r.output;
  r = run_tripod(kRun + "--fp16 --megatron-fsdp-grad-comm-dtype auto");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("fp16 gradient communication (auto under --fp16) is not supported"), std::string::npos)
      << r.output;
  r = run_tripod(kRun + "--outer-dp-sharding-strategy optim");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--outer-dp-sharding-strategy optim: sharding the optimizer state across"), std::string::npos)
      << r.output;
  r = run_tripod(kRun + "--grad-reduce-in-bf16 --megatron-fsdp-grad-comm-dtype fp32");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("contradict each other"), std::string::npos) << r.output;
}

}  // namespace
