// HuggingFaceTokenizer parity: tripod's ids against Hugging Face's tokenizers
// library (its node binding, hf_reference.js; the same Rust code as the
// Python package) on three tokenizer.json files built from GPT-2's real
// vocabulary and merges: Llama 3 style (its Split regex, ignore_merges with
// vocabulary tokens no merge makes, <|begin_of_text|> template, added tokens
// with lstrip), Qwen2 style (its regex, NFC, pair-form merges) and GPT-2
// style (ByteLevel's own regex, add_prefix_space). Cases: every script,
// emoji, digits, code, special tokens inline, CRLF and odd white space,
// combining marks, ill-formed UTF-8, plus seeded random mixes.
//
// Needs node, npm (installs tokenizers into
// ${XDG_CACHE_HOME:-$HOME/.cache}/tripod/hf-node once) and the GPT-2 files
// (scripts/get_gpt2_vocab.sh); skips with the reason when one is missing.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "testing/byte_level.h"
#include "data/gpt2_bpe.h"
#include "data/hf_pretokenizer.h"
#include "data/hf_tokenizer.h"
#include "data/unicode_class.h"
#include "data/utf8.h"
#include "test_util.h"

namespace tripod::data {
namespace {

using tripod::testing::spelled;

using nlohmann::json;
using testing::read_bytes;
using testing::TempDir;
using testing::fetch_gpt2_files;
using testing::Gpt2Files;
using testing::hex;
using testing::source_dir;

std::string cache_dir() {
  const char* x = std::getenv("XDG_CACHE_HOME");
  const char* h = std::getenv("HOME");
  return (x ? std::string(x) : std::string(h ? h : "/tmp") + "/.cache") + "/tripod";
}

// node_modules with tokenizers, GPT-2's vocab and merges; *why when missing.
struct RefSetup {
  std::string modules, vocab, merges, why;
};

const RefSetup& setup() {
  static const RefSetup s = [] {
    RefSetup r;
    TempDir t;
    if (std::system("command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1") != 0) {
      r.why = "node/npm are not installed (apt-get install nodejs npm)";
      return r;
    }
    const Gpt2Files f = fetch_gpt2_files();
    if (f.vocab.empty()) {
      r.why = "GPT-2 files unavailable (scripts/get_gpt2_vocab.sh): " + f.output;
      return r;
    }
    r.vocab = f.vocab, r.merges = f.merges;
    const std::string dir = cache_dir() + "/hf-node";
    const int rc = std::system(fmt::format("mkdir -p {0} && cd {0} && exec 9>.lock && flock 9 && "
                                 "{{ test -f node_modules/tokenizers/package.json || npm install --no-audit "
                                 "--no-fund --silent tokenizers@0.23.2; }} > {1} 2>&1",
                                 dir, t / "npm")
                         .c_str());
    if (rc != 0) {
      r.why = "npm could not install tokenizers: " + read_bytes(t / "npm");
      return r;
    }
    r.modules = dir + "/node_modules";
    return r;
  }();
  return s;
}

json added(int id, const std::string& content, bool lstrip = false) {
  return {{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", lstrip}, {"rstrip", false},
          {"normalized", false}, {"special", true}};
}

json split_then_bytes(HfPattern p) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", std::string(hf_pattern_regex(p))}}},
             {"behavior", "Isolated"}, {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
}

// GPT-2's files as a tokenizer.json of the given style.
json build(const RefSetup& s, const std::string& style) {
  json vocab = json::parse(read_bytes(s.vocab));
  json merges = json::array();
  std::istringstream in(read_bytes(s.merges));
  std::string line;
  for (int n = 0; std::getline(in, line); ++n) {
    if ((n == 0 && line.rfind("#version", 0) == 0) || line.empty()) continue;
    const size_t sp = line.find(' ');
    if (style == "qwen2") merges.push_back({line.substr(0, sp), line.substr(sp + 1)});
    else merges.push_back(line);
  }
  json j = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"normalizer", nullptr},
            {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
            {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}}};
  j["added_tokens"] = json::array({added(50256, "<|endoftext|>")});
  bool ignore = false;
  if (style == "llama3") {
    ignore = true;
    for (const char* w : {"tripodunreachable", " zzqqxx", "'\xc5\xbf"})  // 'ſ: a piece only by its contraction rule
      vocab[spelled(w)] = static_cast<int>(vocab.size());
    const int n = static_cast<int>(vocab.size());
    for (auto [k, name] : {std::pair{0, "<|begin_of_text|>"}, {1, "<|end_of_text|>"}, {2, "<|reserved_special_token_0|>"}})
      j["added_tokens"].push_back(added(n + k, name));
    j["added_tokens"].push_back(added(n + 3, "<mask>", /*lstrip=*/true));
    j["pre_tokenizer"] = split_then_bytes(HfPattern::kLlama3);
    json bos = json::object();
    bos["id"] = "<|begin_of_text|>";
    bos["ids"] = json::array({n});
    bos["tokens"] = json::array({"<|begin_of_text|>"});
    json special = json::object();
    special["<|begin_of_text|>"] = bos;
    json single = json::array();
    single.push_back({{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}});
    single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
    json tmpl = {{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", special}};
    tmpl["pair"] = single;
    tmpl["pair"].push_back({{"Sequence", {{"id", "B"}, {"type_id", 1}}}});
    j["post_processor"] = {{"type", "Sequence"}, {"processors", json::array({j["post_processor"], tmpl})}};
  } else if (style == "qwen2") {
    j["normalizer"] = {{"type", "NFC"}};
    j["added_tokens"].push_back(added(50257, "<|im_start|>"));
    j["added_tokens"].push_back(added(50258, "<|im_end|>"));
    j["pre_tokenizer"] = split_then_bytes(HfPattern::kQwen2);
  } else if (style == "nemo") {
    const int n = static_cast<int>(vocab.size());
    for (auto [k, name] : {std::pair{0, "</s>"}, {1, "<s>"}, {2, "[INST]"}, {3, "[/INST]"}})
      j["added_tokens"].push_back(added(n + k, name));
    j["pre_tokenizer"] = split_then_bytes(HfPattern::kMistralNemo);
  } else {
    j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  }
  j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                {"ignore_merges", ignore}, {"vocab", vocab}, {"merges", merges}};
  return j;
}

std::vector<std::string> cases() {
  const std::vector<std::string> segments = {
      "Hello world", "The quick brown fox jumps over the lazy dog.", "naïve café résumé", "It's", "they'll",
      "I'M", "WE'VE", "don't", "You'Re", "x'ſ", "it'ſelf", "IT'S", "we'LLx", "'s", "''", "rock'n'roll", "Ærøskøbing", "straße",
      "你好，世界！", "日本語のテキストです。", "한국어 텍스트", "Привет, мир!", "Съешь же ещё этих булок",
      "مرحبا بالعالم", "٣٤٥ ١٢", "नमस्ते दुनिया", "สวัสดีครับ", "🤖", "👍🏽", "👨‍👩‍👧‍👦", "🇺🇸", "🤖🤖🤖!",
      "1234567", "3.14159", "2024-12-03", "$100", "1,000,000", "x2y34z567", "Ⅻ", "½²³",
      "def f(x):\n    return x**2  # comment", "for (int i = 0; i < n; ++i) { a[i] += 1; }",
      "<div class=\"x\">&nbsp;</div>", "if (a<|b) {}", "#include <vector>\r\n", "SELECT * FROM t;",
      "<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<mask>",
      "<|im_start|>user\nhi<|im_end|>", "a<|end_of_text|>b", "<|reserved_special_token_0|>",
      "e\xcc\x81", "n\xcc\x83o", "A\xcc\x8a", "\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8", "ǅ ʰ ª µ ß", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
      "HelloWorld", "iPhone", "ABCdef", "XMLHttpRequest", "McDonald's", "ǅungla ǅ", "ʰa aʰ ʰʰ", "中文ABC",
      "ÉCOLE École", "A\xcc\x81" "bc", "Ab\xcc\x81" "C", "\xcc\x81\xcc\x81!", "!\xcc\x81", "https://example.com/a/b\n",
      "a/b//c", "x!!/\n/", "ΑΒΓδε", "ПРИВЕТмир", "[INST] hi [/INST]</s><s>",
      "\xcc\x81", "tripodunreachable", " zzqqxx", "\xff\xfe", "caf\xe9", "\xed\xa0\x80"};
  const std::vector<std::string> spaces = {"", "", " ", " ", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n",
                                           "\r\n\r\n", "   \n", " \n ", "\xc2\xa0", "\xe3\x80\x80",
                                           "\xc2\x85", "\xef\xbb\xbf", "\xe2\x80\xa8", "\v", "\f"};
  std::vector<std::string> c = segments;
  for (const auto& s : spaces) c.push_back(s + "x" + s + s);
  c.push_back(std::string(300, 'a'));
  c.push_back(std::string(100, '1'));
  c.push_back(std::string(80, ' ') + "x");
  c.push_back("  <mask>  x\n<mask>\ny<mask>");
  std::mt19937 rng(20261203);
  for (int k = 0; k < 600; ++k) {
    std::string x;
    const int n = 1 + static_cast<int>(rng() % 30);
    for (int i = 0; i < n; ++i) x += segments[rng() % segments.size()] + spaces[rng() % spaces.size()];
    c.push_back(x);
  }
  return c;
}

// tripod's ids for every case against the library's, with the tokenizer.json at path.
void expect_same_ids(const RefSetup& s, const std::string& path, const std::string& style) {
  TempDir t;
  const auto all = cases();
  {
    std::ofstream f(t / "cases");
    for (const auto& c : all) f << hex(c) << '\n';
  }
  const std::string cmd = fmt::format("node {}/tests/unit/data/hf_reference.js {} {} {} {} 2> {}", source_dir(),
                                      s.modules, path, t / "cases", t / "out", t / "err");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << "\n" << read_bytes(t / "err");
  std::istringstream in(read_bytes(t / "out"));
  HuggingFaceTokenizer tok(path);
  std::string line;
  int failures = 0;
  size_t i = 0, ids = 0;
  for (; std::getline(in, line) && failures < 5; ++i) {
    std::vector<int32_t> want, got;
    std::istringstream ls(line);
    for (int32_t x; ls >> x;) want.push_back(x);
    tok.encode(all[i], &got);
    ids += want.size();
    if (got != want) {
      ++failures;
      ADD_FAILURE() << style << " case " << i << " '" << all[i].substr(0, 120) << "'\n  tripod:     "
                    << fmt::format("{}", fmt::join(got, " ")).substr(0, 300) << "\n  tokenizers: "
                    << fmt::format("{}", fmt::join(want, " ")).substr(0, 300);
    }
  }
  EXPECT_EQ(i, all.size());
  EXPECT_GT(ids, 10000u);
}

void expect_parity(const std::string& style) {
  const RefSetup& s = setup();
  if (s.modules.empty()) GTEST_SKIP() << s.why;
  TempDir t;
  const std::string path = t / (style + ".json");
  std::ofstream(path) << build(s, style).dump();
  expect_same_ids(s, path, style);
}

// The pieces of each pattern, straight from the library's Split.
TEST(HfParity, PreTokenizerPiecesMatchTokenizers) {
  const RefSetup& s = setup();
  if (s.modules.empty()) GTEST_SKIP() << s.why;
  TempDir t;
  const auto all = cases();
  {
    std::ofstream f(t / "cases");
    for (const auto& c : all) f << hex(c) << '\n';
  }
  for (HfPattern p : {HfPattern::kGpt2, HfPattern::kLlama3, HfPattern::kQwen2, HfPattern::kMistralNemo}) {
    std::ofstream(t / "regex") << hf_pattern_regex(p);
    const std::string cmd = fmt::format("node {}/tests/unit/data/hf_reference.js {} --pieces {} {} {} 2> {}",
                                        source_dir(), s.modules, t / "regex", t / "cases", t / "out", t / "err");
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << "\n" << read_bytes(t / "err");
    std::istringstream in(read_bytes(t / "out"));
    std::string line;
    int failures = 0;
    size_t i = 0;
    for (; std::getline(in, line) && failures < 5; ++i) {
      const std::string text = repair_utf8(all[i]);
      std::string got;
      for (auto piece : hf_pretokenize(p, text)) got += (got.empty() ? "" : " ") + hex(std::string(piece));
      if (got != line) {
        ++failures;
        ADD_FAILURE() << hf_pattern_name(p) << " case " << i << " '" << all[i].substr(0, 120)
                      << "'\n  tripod:     " << got.substr(0, 300) << "\n  tokenizers: " << line.substr(0, 300);
      }
    }
    EXPECT_EQ(i, all.size()) << hf_pattern_name(p);
  }
}

TEST(HfParity, Llama3StyleMatchesTokenizers) { expect_parity("llama3"); }
TEST(HfParity, Qwen2StyleMatchesTokenizers) { expect_parity("qwen2"); }
TEST(HfParity, Gpt2StyleMatchesTokenizers) { expect_parity("gpt2"); }
TEST(HfParity, MistralNemoStyleMatchesTokenizers) { expect_parity("nemo"); }

// Real files: Llama 3's tokenizer.json (128 k tokens, 280 k merges,
// ignore_merges, 256 special tokens) and Qwen3's (Qwen2's pattern, NFC, pair
// merges), fetched by scripts/get_hf_tokenizers.sh.
TEST(HfParity, RealLlama3AndQwen3FilesMatchTokenizers) {
  const RefSetup& s = setup();
  if (s.modules.empty()) GTEST_SKIP() << s.why;
  TempDir t;
  const int rc = std::system(fmt::format("{}/scripts/get_hf_tokenizers.sh > {} 2>&1", source_dir(), t / "out").c_str());
  const std::string out = read_bytes(t / "out");
  const auto l = out.find("LLAMA3_TOKENIZER="), q = out.find("QWEN3_TOKENIZER=");
  if (rc != 0 || l == std::string::npos || q == std::string::npos)
    GTEST_SKIP() << "real tokenizer.json files unavailable (scripts/get_hf_tokenizers.sh): " << out;
  const std::string llama3 = out.substr(l + 17, out.find('\n', l) - l - 17);
  const std::string qwen3 = out.substr(q + 16, out.find('\n', q) - q - 16);
  expect_same_ids(s, llama3, "Llama 3 tokenizer.json");
  expect_same_ids(s, qwen3, "Qwen3 tokenizer.json");
  HuggingFaceTokenizer tok(llama3);
  EXPECT_EQ(tok.vocab_size(), 128256);
  EXPECT_EQ(tok.eod(), 128001);  // <|end_of_text|>
  EXPECT_EQ(tok.pattern(), HfPattern::kLlama3);
}

// The case-kind table (Mistral-Nemo's classes) against node's regex engine.
TEST(HfParity, CaseTablesMatchNode) {
  if (std::system("command -v node >/dev/null 2>&1") != 0) GTEST_SKIP() << "node is not installed";
  TempDir t;
  ASSERT_EQ(std::system(fmt::format("node {}/tools/gen_unicode_tables.js --case --ranges > {}", source_dir(),
                                    t / "ranges").c_str()), 0);
  std::istringstream in(read_bytes(t / "ranges"));
  std::string word, version, line;
  in >> word >> version;
  if (version != unicode::kTableUnicodeVersion)
    GTEST_SKIP() << "node has Unicode " << version << ", the tables " << unicode::kTableUnicodeVersion;
  std::vector<uint8_t> expect(0x110000, 0);
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string name, range;
    ls >> name;
    if (name.empty()) continue;
    const auto kind = name == "caseUpper" ? unicode::CaseKind::kUpper
                      : name == "caseLower" ? unicode::CaseKind::kLower : unicode::CaseKind::kBoth;
    while (ls >> range) {
      const uint32_t a = std::stoul(range), b = std::stoul(range.substr(range.find('-') + 1));
      for (uint32_t cp = a; cp <= b; ++cp) expect[cp] = static_cast<uint8_t>(kind);
    }
  }
  int wrong = 0;
  for (uint32_t cp = 0; cp < 0x110000; ++cp)
    if (static_cast<uint8_t>(unicode::case_kind(cp)) != expect[cp] && ++wrong <= 5)
      ADD_FAILURE() << "U+" << std::hex << cp << ": tripod " << int(unicode::case_kind(cp)) << ", node " << int(expect[cp]);
  EXPECT_EQ(wrong, 0);
}

}  // namespace
}  // namespace tripod::data
