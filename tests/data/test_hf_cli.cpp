// HuggingFaceTokenizer through the real executable ($TRIPOD_BIN): `tripod
// preprocess` writes the ids worked out by hand for a small tokenizer.json
// (BOS template, added tokens, ignore_merges, --append-eod), a refused
// pattern names the file and leaves no outputs, and `tripod train` + `tripod
// generate` run with the tokenizer recorded in the checkpoint.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "testing/byte_level.h"
#include "data/gpt2_bpe.h"
#include "data/hf_pretokenizer.h"
#include "unit/data/test_util.h"

namespace tripod::data {
namespace {

using tripod::testing::spelled;

using nlohmann::json;
using testing::read_bytes;
using testing::TempDir;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

int sh(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// Ids 0..255 the bytes; merges "he" 256, "ll" 257, "hell" 258, "hello" 259,
// "ab" 261; "abc" 260 no merge makes (ignore_merges); added 300
// <|begin_of_text|> (put before every text), 301 <|end_of_text|> (eod).
json small_tokenizer(const std::string& regex) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[spelled(std::string(1, static_cast<char>(b)))] = b;
  for (auto [t, id] : {std::pair{"he", 256}, {"ll", 257}, {"hell", 258}, {"hello", 259}, {"abc", 260}, {"ab", 261}})
    vocab[t] = id;
  auto added = [](int id, const char* s) {
    return json{{"id", id}, {"content", s}, {"lstrip", false}, {"rstrip", false}, {"normalized", false},
                {"special", true}};
  };
  json single = json::array();
  single.push_back({{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}});
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  json bos = {{"id", "<|begin_of_text|>"}, {"ids", json::array({300})}};
  json special = json::object();
  special["<|begin_of_text|>"] = bos;
  json split = {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
  json bytes = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  return {{"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", json::array({split, bytes})}}},
          {"post_processor", {{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", special}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"added_tokens", json::array({added(300, "<|begin_of_text|>"), added(301, "<|end_of_text|>")})},
          {"model", {{"type", "BPE"}, {"ignore_merges", true}, {"vocab", vocab},
                     {"merges", {"h e", "l l", "he ll", "hell o", "a b"}}}}};
}

class HfCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (env("TRIPOD_BIN").empty()) GTEST_SKIP() << "TRIPOD_BIN is not set (run through ctest)";
    std::ofstream(dir_ / "tokenizer.json") << small_tokenizer(std::string(hf_pattern_regex(HfPattern::kLlama3))).dump();
  }
  int preprocess(const std::string& tokenizer, const std::string& input, const std::string& prefix, std::string* log) {
    const int rc = sh(fmt::format("{} preprocess --input {} --output-prefix {} --tokenizer-type HuggingFaceTokenizer "
                                  "--tokenizer-model {} --append-eod --workers 2 --no-progress > {} 2>&1",
                                  env("TRIPOD_BIN"), input, prefix, tokenizer, dir_ / "log"));
    *log = read_bytes(dir_ / "log");
    return rc;
  }
  TempDir dir_;
};

TEST_F(HfCli, PreprocessWritesHandWorkedIds) {
  std::ofstream(dir_ / "in.jsonl") << R"({"text": "hello<|end_of_text|>abc"})" "\n"
                                   << R"({"text": "ab hello"})" "\n";
  std::string log;
  ASSERT_EQ(preprocess(dir_ / "tokenizer.json", dir_ / "in.jsonl", dir_ / "out", &log), 0) << log;
  std::string bin;
  for (uint16_t t : {300, 259, 301, 260, 301, 300, 261, 32, 259, 301})
    bin.append(reinterpret_cast<const char*>(&t), 2);
  EXPECT_EQ(read_bytes(dir_ / "out_text_document.bin"), bin);
  EXPECT_NE(log.find("2 documents, 10 tokens"), std::string::npos) << log;
}

TEST_F(HfCli, UnknownPatternNamesFileAndPatternAndWritesNothing) {
  std::ofstream(dir_ / "bad.json") << small_tokenizer("\\p{L}+|[0-9]+").dump();
  std::ofstream(dir_ / "in.jsonl") << R"({"text": "hello"})" "\n";
  std::string log;
  EXPECT_NE(preprocess(dir_ / "bad.json", dir_ / "in.jsonl", dir_ / "out", &log), 0);
  EXPECT_NE(log.find(dir_ / "bad.json"), std::string::npos) << log;
  EXPECT_NE(log.find("\\\\p{L}+|[0-9]+"), std::string::npos) << log;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "out_text_document.bin"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "out_text_document.idx"));
}

TEST_F(HfCli, TrainAndGenerateUseTheRecordedTokenizer) {
  {
    std::ofstream f(dir_ / "in.jsonl");
    for (int i = 0; i < 200; ++i) f << R"({"text": "hello abc hello ab hello<|end_of_text|>abc hell"})" "\n";
  }
  std::string log;
  ASSERT_EQ(preprocess(dir_ / "tokenizer.json", dir_ / "in.jsonl", dir_ / "d", &log), 0) << log;
  ASSERT_EQ(sh(fmt::format("{} train --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 "
                           "--micro-batch-size 4 --global-batch-size 4 --train-iters 20 --lr 1e-2 "
                           "--data-path {} --split 98,2,0 --tokenizer-type HuggingFaceTokenizer "
                           "--tokenizer-model {} --log-interval 10 --eval-interval 0 --save {} > {} 2>&1",
                           env("TRIPOD_BIN"), dir_ / "d_text_document", dir_ / "tokenizer.json", dir_ / "ck",
                           dir_ / "log")), 0)
      << read_bytes(dir_ / "log");
  EXPECT_NE(read_bytes(dir_ / "log").find("HuggingFaceTokenizer (302 ids"), std::string::npos)
      << read_bytes(dir_ / "log");
  // No tokenizer flags: generate takes type and file from the checkpoint.
  ASSERT_EQ(sh(fmt::format("{} generate --load {} --prompt 'hello abc' --max-new-tokens 8 --greedy > {} 2> {}",
                           env("TRIPOD_BIN"), dir_ / "ck", dir_ / "gen.txt", dir_ / "log")), 0)
      << read_bytes(dir_ / "log");
  const std::string text = read_bytes(dir_ / "gen.txt");
  EXPECT_EQ(text.rfind("hello abc", 0), 0u) << text;
  EXPECT_GT(text.size(), std::string("hello abc\n").size()) << text;
}

}  // namespace
}  // namespace tripod::data
