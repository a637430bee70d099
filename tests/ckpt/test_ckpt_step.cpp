// --ckpt-step N (Megatron's flag) through `tripod train`: resume from an
// earlier iteration than the latest, bit for bit; a damaged latest
// checkpoint is an error that names the newest earlier iteration that
// verifies and the flag that loads it; a missing iteration lists the saved ones.
#include <gtest/gtest.h>

#include "common.h"

namespace {

using namespace ckpt_test;

const std::string kModel =
    "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data --vocab-size 300 "
    "--micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 1 "
    "--lr-decay-iters 8 --hidden-dropout 0.1 --seed 3 --log-interval 1 --eval-interval 0";

int train(const Scratch& s, const std::string& name, const std::string& flags) {
  return sh(env("TRIPOD_BIN") + " train " + kModel + " " + flags + " --metrics-file " +
            (s / (name + ".jsonl")).string() + " > " + (s / (name + ".log")).string() + " 2>&1");
}

TEST(CkptStep, DamagedLatestNamesTheNewestIntactIterationAndCkptStepResumesBitExactly) {
  Scratch s("ckpt_step");
  const std::string ck = (s / "ck").string();
  ASSERT_EQ(train(s, "straight", "--train-iters 8"), 0) << slurp(s / "straight.log");
  ASSERT_EQ(train(s, "first", "--train-iters 6 --save-interval 2 --save " + ck), 0) << slurp(s / "first.log");
  ASSERT_EQ(slurp(s / "ck" / "latest_checkpointed_iteration.txt"), "6\n");
  // Damage the latest: its rank file loses its last byte.
  const fs::path f6 = s / "ck" / "iter_0000006" / "model_rank_0_0.safetensors";
  fs::resize_file(f6, fs::file_size(f6) - 1);
  EXPECT_NE(train(s, "bad", "--train-iters 8 --load " + ck), 0);
  const std::string bad = slurp(s / "bad.log");
  EXPECT_NE(bad.find("the latest checkpoint, iteration 6, cannot be loaded"), std::string::npos) << bad;
  EXPECT_NE(bad.find("truncated or corrupt"), std::string::npos) << bad;
  EXPECT_NE(bad.find("iteration 4 is the newest earlier checkpoint that verifies: pass --ckpt-step 4"),
            std::string::npos) << bad;
  // Damage iteration 4 too (its metadata): the hint moves to iteration 2.
  {
    std::ofstream(s / "ck" / "iter_0000004" / "metadata.json", std::ios::app) << " ";
    std::string m = slurp(s / "ck" / "iter_0000004" / "metadata.json");
    m[m.find("\"consumed_samples\"") + 20] = '9';
    std::ofstream(s / "ck" / "iter_0000004" / "metadata.json", std::ios::trunc) << m;
  }
  EXPECT_NE(train(s, "bad2", "--train-iters 8 --load " + ck), 0);
  EXPECT_NE(slurp(s / "bad2.log").find("pass --ckpt-step 2 to resume from it"), std::string::npos)
      << slurp(s / "bad2.log");
  // --ckpt-step 4 itself is damaged: the hint names 2 again.
  EXPECT_NE(train(s, "bad3", "--train-iters 8 --load " + ck + " --ckpt-step 4"), 0);
  EXPECT_NE(slurp(s / "bad3.log").find("iteration 4 (--ckpt-step) cannot be loaded"), std::string::npos)
      << slurp(s / "bad3.log");
  EXPECT_NE(slurp(s / "bad3.log").find("pass --ckpt-step 2"), std::string::npos) << slurp(s / "bad3.log");
  // --ckpt-step 2 resumes: iterations 3..8 equal the uninterrupted run's bits.
  ASSERT_EQ(train(s, "resumed", "--train-iters 8 --load " + ck + " --ckpt-step 2"), 0) << slurp(s / "resumed.log");
  const auto full = losses(s / "straight.jsonl"), got = losses(s / "resumed.jsonl");
  ASSERT_EQ(full.size(), 8u);
  ASSERT_EQ(got.size(), 6u) << slurp(s / "resumed.log");
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], full[i + 2]) << "iteration " << got[i].first;
  if (!HasFailure()) fs::remove_all(s.dir);
}

TEST(CkptStep, MissingIterationListsTheSavedOnesAndNeedsLoad) {
  Scratch s("ckpt_step_missing");
  const std::string ck = (s / "ck").string();
  ASSERT_EQ(train(s, "first", "--train-iters 4 --save-interval 2 --save " + ck), 0) << slurp(s / "first.log");
  EXPECT_NE(train(s, "miss", "--train-iters 8 --load " + ck + " --ckpt-step 3"), 0);
  const std::string miss = slurp(s / "miss.log");
  EXPECT_NE(miss.find("--ckpt-step 3: --load " + ck + " holds no iter_0000003"), std::string::npos) << miss;
  EXPECT_NE(miss.find("pass one of the saved iterations: 2, 4"), std::string::npos) << miss;
  EXPECT_NE(train(s, "noload", "--train-iters 8 --ckpt-step 2"), 0);
  EXPECT_NE(slurp(s / "noload.log").find("--ckpt-step 2 names an iteration to load, but there is no --load"),
            std::string::npos) << slurp(s / "noload.log");
  if (!HasFailure()) fs::remove_all(s.dir);
}

}  // namespace
