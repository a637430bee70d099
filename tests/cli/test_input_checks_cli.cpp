// Bad input stopped at the start, in the user's words, through the real
// executable ($TRIPOD_BIN):
//  - a --vocab-size below the tokenizer's vocabulary, and data ids above
//    the model's vocabulary, name both numbers and the fix;
//  - every float flag refuses NaN and infinities, naming the flag;
//  - a checkpoint loaded with other model flags: every difference named as
//    the flag is written, with the checkpoint's value and the matching flag;
//    a changed --norm-epsilon is not taken silently;
//  - Megatron's --tokenizer-type names: the SentencePiece ones give the same
//    bytes as SentencePieceTokenizer, the others say what to use;
//  - `generate` with ill-formed UTF-8 in the prompt prints the repaired
//    prompt (what the model saw: the same logits as the prompt with U+FFFD
//    typed in) and says it was repaired.
// The cases with GPT-2's tokenizer skip (with the reason) when its files
// cannot be fetched; the SentencePiece case when spm_train is missing.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "testing/run_tripod.h"
#include "unit/data/test_util.h"

namespace {

namespace fs = std::filesystem;
using tripod::data::testing::read_bytes;
using tripod::data::testing::TempDir;
using tripod::testing::run_tripod;

const tripod::data::testing::Gpt2Files& gpt2() {
  static const auto f = tripod::data::testing::fetch_gpt2_files();
  return f;
}

// A tiny model on mock data: the checks under test all happen before the first step.
const std::string kTiny =
    "train --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 --micro-batch-size 1 "
    "--train-iters 1 --lr 1e-3 --mock-data ";

class InputChecks : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::getenv("TRIPOD_BIN")) GTEST_SKIP() << "TRIPOD_BIN is not set (run through ctest)";
  }
  void need_gpt2() {
    if (gpt2().vocab.empty()) GTEST_SKIP() << "GPT-2 files unavailable: " << gpt2().output;
  }
  std::string gpt2_flags() const { return " --vocab-file " + gpt2().vocab + " --merge-file " + gpt2().merges; }
  TempDir dir_;
};

TEST_F(InputChecks, VocabSizeBelowTheTokenizerIsRefused) {
  need_gpt2();
  auto r = run_tripod(kTiny + "--vocab-size 512" + gpt2_flags());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--vocab-size 512 is smaller than the tokenizer's vocabulary of 50257 tokens: its ids "
                          "512..50256 would have no embedding row"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("drop --vocab-size (the tokenizer sets it to 50257), or pass --vocab-size 50257 or more"),
            std::string::npos) << r.output;
  // Equal (or larger) is a model that holds every id: it trains.
  r = run_tripod(kTiny + "--vocab-size 50257" + gpt2_flags());
  EXPECT_EQ(r.code, 0) << r.output;

  // Data made with GPT-2's tokenizer under a 512-token model without tokenizer files: the largest id and the fix.
  std::ofstream(dir_ / "in.txt") << "Hello world\n";
  r = run_tripod(fmt::format("preprocess --input {} --input-format text --output-prefix {} --tokenizer-type "
                             "GPT2BPETokenizer --append-eod --no-progress",
                             dir_ / "in.txt", dir_ / "d") + gpt2_flags());
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_tripod("train --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 2 "
                 "--micro-batch-size 1 --train-iters 1 --lr 1e-3 --vocab-size 512 --split 1 --data-path " +
                 dir_ / "d_text_document");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(dir_ / "d_text_document.bin" + " contains token id 50256 but the model's padded "
                          "vocabulary has only 512 entries (ids 0..511)"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--vocab-size 50257 or more"), std::string::npos) << r.output;
}

TEST_F(InputChecks, FloatFlagsRefuseNanAndInfinityNamingTheFlag) {
  for (const char* flag : {"--lr", "--min-lr", "--norm-epsilon", "--hidden-dropout"}) {
    for (const char* v : {"nan", "-inf", "1e999"}) {
      const auto r = run_tripod(kTiny + "--vocab-size 64 " + flag + " " + v);
      EXPECT_NE(r.code, 0) << flag << " " << v << ": " << r.output;
      EXPECT_NE(r.output.find(fmt::format("{}: '{}' is not a finite number", flag, v)), std::string::npos)
          << r.output;
    }
  }
  // The same through a --config file and in `tripod plan`; a finite value still parses.
  std::ofstream(dir_ / "run.conf") << "--lr inf\n";
  auto r = run_tripod(kTiny + "--vocab-size 64 --config " + dir_ / "run.conf");
  EXPECT_NE(r.output.find("--lr: 'inf' is not a finite number"), std::string::npos) << r.output;
  r = run_tripod("plan --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 64 "
                 "--norm-epsilon nan");
  EXPECT_NE(r.output.find("--norm-epsilon: 'nan' is not a finite number"), std::string::npos) << r.output;
  r = run_tripod(kTiny + "--vocab-size 64 --lr 1e-3 --parse-only");
  EXPECT_EQ(r.code, 0) << r.output;
}

TEST_F(InputChecks, CheckpointLoadedWithOtherModelFlagsNamesEachFlag) {
  const std::string gpt = kTiny + "--hidden-size 32 --vocab-size 64 ";
  auto r = run_tripod(gpt + "--save " + dir_ / "ck" + " --save-interval 1");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_tripod(gpt + "--train-iters 2 --load " + dir_ / "ck" +
                 " --normalization RMSNorm --swiglu --position-embedding-type rope "
                 "--untie-embeddings-and-output-weights --disable-bias-linear --group-query-attention "
                 "--num-query-groups 1");
  EXPECT_EQ(r.code, 2) << r.output;
  // SwiGLU's default width for hidden 32: (4 * 32 * 2 / 3) / 64 * 64 = 64; GELU's 4 * 32 = 128.
  for (const char* line :
       {"the model flags contradict the checkpoint ", "(7 differences):\n",
        "\n  --normalization RMSNorm: the checkpoint's layers use LayerNorm\n",
        "\n  --swiglu: the checkpoint has a GELU MLP (trained without --swiglu)\n",
        "\n  --position-embedding-type rope: the checkpoint uses learned_absolute\n",
        "\n  --untie-embeddings-and-output-weights: the checkpoint ties the output layer to the word embedding",
        "\n  --disable-bias-linear: the checkpoint has biases in its linear layers",
        "\n  --group-query-attention --num-query-groups 1: the checkpoint has 2 key/value heads, one per attention "
        "head (trained without --group-query-attention)\n",
        "\n  --ffn-hidden-size 64 (given, or the default for --hidden-size and --swiglu): the checkpoint has 128\n",
        "hint: use the checkpoint's model flags: --normalization LayerNorm; drop --swiglu; "
        "--position-embedding-type learned_absolute; drop --untie-embeddings-and-output-weights; drop "
        "--disable-bias-linear; drop --group-query-attention and --num-query-groups; --ffn-hidden-size 128; or "
        "--load another checkpoint"})
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  EXPECT_EQ(r.output.find("(0/1)"), std::string::npos) << r.output;
  // The swiglu line comes before the width it implies.
  EXPECT_LT(r.output.find("--swiglu: the checkpoint"), r.output.find("--ffn-hidden-size 64"));

  // A checkpoint without the flag the run omits, the other way round.
  r = run_tripod(kTiny + "--hidden-size 32 --vocab-size 64 --swiglu --disable-bias-linear --save " + dir_ / "ck2" +
                 " --save-interval 1");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_tripod(gpt + "--train-iters 2 --load " + dir_ / "ck2");
  EXPECT_NE(r.output.find("\n  no --swiglu: the checkpoint has a SwiGLU MLP (trained with --swiglu)\n"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("add --swiglu; add --disable-bias-linear; --ffn-hidden-size 64"), std::string::npos)
      << r.output;

  // --norm-epsilon: the same parameters computing something else; refused on resume, logged with --finetune.
  r = run_tripod(gpt + "--train-iters 2 --load " + dir_ / "ck" + " --norm-epsilon 1e-6");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("(1 difference):\n  --norm-epsilon 1e-06: the checkpoint was trained with 1e-05\n"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("use the checkpoint's model flags: --norm-epsilon 1e-05"), std::string::npos) << r.output;
  r = run_tripod(gpt + "--train-iters 2 --load " + dir_ / "ck" + " --norm-epsilon 1e-6 --finetune");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("--norm-epsilon 1e-06: the checkpoint was trained with 1e-05 (the new value is used)"),
            std::string::npos) << r.output;
  // The same flags resume.
  r = run_tripod(gpt + "--train-iters 2 --load " + dir_ / "ck");
  EXPECT_EQ(r.code, 0) << r.output;
}

TEST_F(InputChecks, MegatronTokenizerNamesMapOrSayWhatToUse) {
  // Names tripod cannot serve: the mapping is named, before any compute.
  auto r = run_tripod(kTiny + "--vocab-size 64 --tokenizer-type Llama3Tokenizer --tokenizer-model x.model");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--tokenizer-type Llama3Tokenizer is not supported"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--tokenizer-type HuggingFaceTokenizer --tokenizer-model"), std::string::npos) << r.output;
  r = run_tripod(kTiny + "--vocab-size 64 --tokenizer-type TikTokenizer");
  EXPECT_NE(r.output.find("--tokenizer-type TikTokenizer is not supported"), std::string::npos) << r.output;
  r = run_tripod(kTiny + "--vocab-size 64 --tokenizer-type Llama2Tokenizr");
  EXPECT_NE(r.output.find("unknown --tokenizer-type 'Llama2Tokenizr'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("GPTSentencePieceTokenizer or Llama2Tokenizer"), std::string::npos) << r.output;
  // NullTokenizer trains on ids with --vocab-size, as in Megatron.
  r = run_tripod(kTiny + "--vocab-size 64 --tokenizer-type NullTokenizer");
  EXPECT_EQ(r.code, 0) << r.output;

  if (std::system("command -v spm_train >/dev/null") != 0) GTEST_SKIP() << "spm_train missing (sentencepiece)";
  {
    std::ofstream f(dir_ / "corpus.txt");
    for (int i = 0; i < 40; ++i)
      f << "In the beginning God created the heaven and the earth " << i << ".\nAnd the earth was without form.\n";
  }
  ASSERT_EQ(std::system(fmt::format("spm_train --input={} --model_prefix={} --vocab_size=40 --minloglevel=2 "
                                    "> /dev/null 2>&1",
                                    dir_ / "corpus.txt", dir_ / "sp").c_str()),
            0);
  std::string want;
  for (const char* type : {"SentencePieceTokenizer", "GPTSentencePieceTokenizer", "Llama2Tokenizer"}) {
    r = run_tripod(fmt::format("preprocess --input {} --input-format text --output-prefix {} --tokenizer-type {} "
                               "--tokenizer-model {} --append-eod --no-progress",
                               dir_ / "corpus.txt", dir_ / type, type, dir_ / "sp.model"));
    ASSERT_EQ(r.code, 0) << r.output;
    const std::string bytes = read_bytes(dir_ / (std::string(type) + "_text_document.bin")) + "|" +
                              read_bytes(dir_ / (std::string(type) + "_text_document.idx"));
    if (want.empty()) want = bytes;
    EXPECT_EQ(bytes, want) << type;
    if (std::string(type) != "SentencePieceTokenizer")
      EXPECT_NE(r.output.find(fmt::format("--tokenizer-type {}: tripod's SentencePieceTokenizer", type)),
                std::string::npos) << r.output;
  }
  EXPECT_GT(want.size(), 400u);
}

TEST_F(InputChecks, GeneratePrintsTheRepairedPromptTheModelSaw) {
  need_gpt2();
  auto r = run_tripod(kTiny + "--save " + dir_ / "ck" + " --save-interval 1" + gpt2_flags());
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string bin = std::getenv("TRIPOD_BIN");
  auto generate = [&](const std::string& prompt_file, const std::string& name) {
    // The prompt's bytes come from a file: a shell argument cannot be typed with a stray \xff portably.
    const std::string cmd = fmt::format(
        "{} generate --load {} --prompt \"$(cat {})\" --max-new-tokens 3 --greedy --logits-out {} > {} 2> {}", bin,
        dir_ / "ck", prompt_file, dir_ / (name + ".logits"), dir_ / (name + ".out"), dir_ / (name + ".err"));
    EXPECT_EQ(std::system(cmd.c_str()), 0) << read_bytes(dir_ / (name + ".err"));
  };
  std::ofstream(dir_ / "bad.txt", std::ios::binary) << "Hello\xff\xfe world";  // two ill-formed bytes
  std::ofstream(dir_ / "good.txt", std::ios::binary) << "Hello\xEF\xBF\xBD\xEF\xBF\xBD world";  // U+FFFD typed
  generate(dir_ / "bad.txt", "bad");
  generate(dir_ / "good.txt", "good");
  const std::string out = read_bytes(dir_ / "bad.out");
  EXPECT_EQ(out.rfind("Hello\xEF\xBF\xBD\xEF\xBF\xBD world", 0), 0u) << out;
  EXPECT_EQ(out.find('\xff'), std::string::npos) << out;
  EXPECT_EQ(out, read_bytes(dir_ / "good.out"));
  // What the model saw: the same logits as the prompt with U+FFFD typed in.
  EXPECT_EQ(read_bytes(dir_ / "bad.logits"), read_bytes(dir_ / "good.logits"));
  EXPECT_GT(read_bytes(dir_ / "bad.logits").size(), 0u);
  EXPECT_NE(read_bytes(dir_ / "bad.err").find("--prompt is not valid UTF-8: repaired, its 2 ill-formed byte "
                                              "sequence(s) replaced by U+FFFD"),
            std::string::npos) << read_bytes(dir_ / "bad.err");
  EXPECT_EQ(read_bytes(dir_ / "good.err").find("not valid UTF-8"), std::string::npos);
}

}  // namespace
