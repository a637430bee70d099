// A checkpoint written by Megatron-LM itself (fixtures/megatron_gpt_tiny,
// README there): `tripod convert --import-megatron` imports it, and tripod's
// validation loss on the same files, split and seed equals the one Megatron
// printed for those weights (6.943834, the first 2 validation batches of 8).
#include <gtest/gtest.h>

#include <regex>

#include "common.h"

namespace {

using namespace ckpt_test;

TEST(MegatronReal, ImportedCheckpointReproducesMegatronsValidationLoss) {
  Scratch s("megatron_real");
  const std::string fix = env("TRIPOD_SOURCE_DIR") + "/tests/ckpt/fixtures/megatron_gpt_tiny";
  // The data files are copied: tripod writes its sample-index caches beside them.
  ASSERT_EQ(sh("cp " + fix + "/docs_text_document.bin " + fix + "/docs_text_document.idx " + s.dir.string()), 0);
  const std::string log = (s / "log").string();
  int rc = sh(env("TRIPOD_BIN") + " convert --import-megatron " + fix + "/ckpt --save " + (s / "ck").string() +
              " > " + log + " 2>&1");
  ASSERT_EQ(rc, 0) << slurp(log);
  EXPECT_NE(slurp(log).find("TP 1 x PP 1"), std::string::npos) << slurp(log);

  rc = sh("OMP_NUM_THREADS=1 " + env("TRIPOD_BIN") + " train --device cpu --load " + (s / "ck").string() +
          " --finetune --lr 0 --train-iters 1 --eval-interval 1 --eval-iters 2 --log-interval 1"
          " --data-path " + (s / "docs_text_document").string() + " --split 90,8,2 --seed 1234"
          " --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64"
          " --micro-batch-size 4 --global-batch-size 8 --tokenizer-type NullTokenizer --vocab-size 1000"
          " --attention-dropout 0 --hidden-dropout 0 > " + log + " 2>&1");
  const std::string out = slurp(log);
  ASSERT_EQ(rc, 0) << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(validation loss at iteration 1 \| lm loss value: ([0-9.E+-]+))")))
      << out;
  // Megatron (fp32 on the GPU, erf GELU) vs tripod (fp32 on the CPU): equal
  // to the 7 digits Megatron prints.
  EXPECT_NEAR(std::stod(m[1]), 6.943834, 2e-6) << out;
}

}  // namespace
