// The Llama-family model flags through `tripod train` (train/flag_table.cpp, TrainArgs::finalize,
// config::GptConfig::finalize, GptModel's layout rules): each bad value stops
// the run before any work with a message naming the flag and the fix, and a
// good configuration builds the model it names, with the parameter count of
// a hand count.
#include <gtest/gtest.h>

#include <string>

#include "testing/run_tripod.h"

namespace {

using tripod::testing::run_tripod;

const std::string kBase =
    "train --device cpu --num-layers 2 --hidden-size 64 --num-attention-heads 8 --seq-length 16 --mock-data "
    "--vocab-size 100 --micro-batch-size 2 --train-iters 1 --log-interval 1 --eval-interval 0 ";
const std::string kLlama =
    "--group-query-attention --num-query-groups 2 --position-embedding-type rope --normalization RMSNorm --swiglu "
    "--ffn-hidden-size 96 --untie-embeddings-and-output-weights --disable-bias-linear ";

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

void expect_error(const std::string& flags, const std::vector<std::string>& parts) {
  const auto r = run_tripod(kBase + flags);
  EXPECT_NE(r.code, 0) << flags << "\n" << r.output;
  for (const auto& p : parts) EXPECT_TRUE(has(r.output, p)) << flags << ": no '" << p << "' in\n" << r.output;
}

TEST(LlamaFlags, BadValuesNameTheFlagAndTheFix) {
  expect_error("--position-embedding-type alibi", {"--position-embedding-type alibi is not one of",
                                                   "--position-embedding-type rope"});
  expect_error("--normalization BatchNorm", {"--normalization BatchNorm is not one of LayerNorm, RMSNorm"});
  expect_error("--use-rotary-position-embeddings --position-embedding-type learned_absolute",
               {"--use-rotary-position-embeddings contradicts --position-embedding-type learned_absolute"});
  expect_error("--group-query-attention", {"--group-query-attention needs --num-query-groups"});
  expect_error("--group-query-attention --num-query-groups 3",
               {"--num-attention-heads 8 is not divisible by --num-query-groups 3"});
  expect_error("--kv-channels 16", {"--kv-channels 16 differs from --hidden-size 64 / --num-attention-heads 8 = 8",
                                    "drop --kv-channels"});
  expect_error("--position-embedding-type rope --rotary-percent 1.5", {"--rotary-percent is 1.5"});
  expect_error("--norm-epsilon 0", {"--norm-epsilon is 0"});
  // Each tp rank holds whole query groups (Megatron's rule).
  const auto r = run_tripod("launch --nproc-per-node 2 " + kBase + kLlama +
                            "--num-query-groups 1 --tensor-model-parallel-size 2");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "--num-query-groups 1 is not divisible by --tensor-model-parallel-size 2")) << r.output;
}

TEST(LlamaFlags, GoodConfigurationsBuildWhatTheyName) {
  // Hand count at vocab 100: per layer 2 x 64 (RMSNorm gains) + 96 x 64 (qkv: (8 + 2 x 2) heads of 8)
  // + 64 x 64 (proj) + 192 x 64 (fc1 = [gate | up]) + 64 x 96 (fc2) = 28800; x 2 = 57600;
  // + 100 x 64 (embedding) + 100 x 64 (output layer) + 64 (final norm) = 70464.
  auto r = run_tripod(kBase + kLlama);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "GPT (RMSNorm, RoPE, SwiGLU, GQA, untied, no bias): 2 layers, hidden 64, 8 heads, "
                            "2 query groups, ffn 96")) << r.output;
  EXPECT_TRUE(has(r.output, "(70464 params at vocab 100)")) << r.output;
  // --use-rotary-position-embeddings is --position-embedding-type rope; --no-position-embedding
  // alone leaves no position information (Megatron's meaning); --num-query-groups without
  // --group-query-attention is ignored, as in Megatron.
  r = run_tripod(kBase + "--use-rotary-position-embeddings --num-query-groups 2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "GPT (LayerNorm, RoPE, GELU): 2 layers, hidden 64, 8 heads, 8 query groups")) << r.output;
  r = run_tripod(kBase + "--no-position-embedding");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "GPT (LayerNorm, no positions, GELU)")) << r.output;
  // SwiGLU without --ffn-hidden-size: Megatron's 2/3 x 4C rounded down to a multiple of 64 (4 x 64 x 2/3 = 170 -> 128).
  r = run_tripod(kBase + "--swiglu");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "ffn 128")) << r.output;
  // The defaults are GPT-2, described as before.
  r = run_tripod(kBase);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "GPT: 2 layers, hidden 64, 8 heads, ffn 256")) << r.output;
}

TEST(LlamaFlags, PlanTakesTheSameFlags) {
  // The Llama ~1B bench shape. Hand count: per layer 2 x 2048 (RMSNorm) + 3072 x 2048 (qkv: (32 + 2 x 8)
  // heads of 64) + 2048 x 2048 (proj) + 11264 x 2048 (fc1) + 2048 x 5632 (fc2) = 45092864; x 16
  // = 721485824; + 2 x 32000 x 2048 (embedding, output layer) + 2048 (final norm) = 852559872.
  const std::string shape =
      "plan --num-layers 16 --hidden-size 2048 --num-attention-heads 32 --group-query-attention "
      "--num-query-groups 8 --ffn-hidden-size 5632 --seq-length 2048 --vocab-size 32000 --position-embedding-type "
      "rope --normalization RMSNorm --swiglu --untie-embeddings-and-output-weights --disable-bias-linear "
      "--micro-batch-size 4 ";
  auto r = run_tripod(shape + "--global-batch-size 4 --gpus-per-node 1 --json");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "\"num_parameters\": 852559872")) << r.output;
  r = run_tripod(shape + "--global-batch-size 4 --gpus-per-node 1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "# options: 8 query groups, RMSNorm, SwiGLU MLP, untied output layer, no biases, "
                            "no learned positions")) << r.output;
  // Each tp rank holds whole query groups: tp 16 is not a layout for 8 groups.
  r = run_tripod(shape + "--tensor-model-parallel-size 16 --gpus-per-node 16 --global-batch-size 64");
  EXPECT_TRUE(has(r.output, "0 layouts obey the rules")) << r.output;
  EXPECT_TRUE(has(r.output, "query groups % TP")) << r.output;
}

}  // namespace
