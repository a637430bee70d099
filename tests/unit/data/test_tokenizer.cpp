// Tokenizer pieces that need no reference program: the GPT-2 pre-tokenizer
// on hand-split examples, the UTF-8 repair policy against the Unicode
// "maximal subpart" examples (the same results as Python's
// bytes.decode("utf-8", "replace")), GPT-2's byte alphabet, and SentencePiece:
// a model trained at test time by Debian's spm_train on Chinese text, whose
// ids must equal spm_encode's and decode back to the text.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "data/gpt2_bpe.h"
#include "data/gpt2_pretokenizer.h"
#include "data/tokenizer.h"
#include "data/utf8.h"
#include "test_util.h"

namespace tripod::data {
namespace {

using testing::read_bytes;
using testing::TempDir;

std::vector<std::string> pieces(const std::string& s) {
  std::vector<std::string> v;
  for (auto p : gpt2_pretokenize(s)) v.emplace_back(p);
  return v;
}

TEST(GPT2PreTokenizer, SplitsLikeThePattern) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("Hello world! It's 2024"), (V{"Hello", " world", "!", " It", "'s", " 2024"}));
  // A space run gives its last character to what follows; only U+0020 then
  // joins the next word, a tab (or U+3000) stands alone.
  EXPECT_EQ(pieces("a   b\tc \td"), (V{"a", "  ", " b", "\t", "c", " ", "\t", "d"}));
  EXPECT_EQ(pieces("x  \n\n"), (V{"x", "  \n\n"}));
  EXPECT_EQ(pieces("they'll 'S ''s"), (V{"they", "'ll", " '", "S", " ''", "s"}));
  EXPECT_EQ(pieces("ab12cd!?ef"), (V{"ab", "12", "cd", "!?", "ef"}));
  EXPECT_EQ(pieces(" 42 ٣٤ é你好 🤖🤖"), (V{" 42", " ٣٤", " é你好", " 🤖🤖"}));
  EXPECT_EQ(pieces("a\xe3\x80\x80\xe3\x80\x80" "b"), (V{"a", "\xe3\x80\x80", "\xe3\x80\x80", "b"}));
  EXPECT_EQ(pieces("e\xcc\x81t"), (V{"e", "\xcc\x81", "t"}));  // U+0301 is a mark, not a letter
  EXPECT_EQ(pieces(""), V{});
}

TEST(Utf8, RepairReplacesMaximalSubparts) {
  int64_t n = -1;
  EXPECT_TRUE(is_valid_utf8("plain ascii and é你🤖"));
  EXPECT_EQ(repair_utf8("ok", &n), "ok");
  EXPECT_EQ(n, 0);
  const std::string R = "\xEF\xBF\xBD";
  // b"\xe0\xa0A".decode("utf-8", "replace") == "\ufffdA", etc.
  EXPECT_EQ(repair_utf8("\xe0\xa0" "A", &n), R + "A");
  EXPECT_EQ(n, 1);
  EXPECT_EQ(repair_utf8("\xf0\x80", &n), R + R);
  EXPECT_EQ(n, 2);
  EXPECT_EQ(repair_utf8("\xed\xa0\x80"), R + R + R);  // surrogate
  EXPECT_EQ(repair_utf8("\xc0\xaf"), R + R);          // overlong
  EXPECT_EQ(repair_utf8("\xf4\x90\x80\x80"), R + R + R + R);
  EXPECT_EQ(repair_utf8("a\xf0\x9f\x98"), "a" + R);    // truncated at the end
  EXPECT_EQ(repair_utf8("caf\xe9!"), "caf" + R + "!");
  EXPECT_FALSE(is_valid_utf8("caf\xe9"));
}

TEST(GPT2Bytes, ByteAlphabet) {
  EXPECT_EQ(gpt2_byte_to_unicode(' '), 0x120u);   // Ġ
  EXPECT_EQ(gpt2_byte_to_unicode('\n'), 0x10Au);  // Ċ
  EXPECT_EQ(gpt2_byte_to_unicode('a'), static_cast<uint32_t>('a'));
  EXPECT_EQ(gpt2_byte_to_unicode(0xAD), 0x143u);  // the last remapped byte
  EXPECT_EQ(gpt2_byte_to_unicode(0xFF), 0xFFu);
}

TEST(Tokenizer, BadConfigurationsAreClearErrors) {
  TokenizerConfig c;
  c.type = "NoSuchTokenizer";
  EXPECT_THROW(make_tokenizer(c), Error);
  c.type = "GPT2BPETokenizer";
  EXPECT_THROW(make_tokenizer(c), Error);  // no files
  c.vocab_file = "/nonexistent/encoder.json";
  c.merge_file = "/nonexistent/vocab.bpe";
  try {
    make_tokenizer(c);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("/nonexistent/encoder.json"), std::string::npos);
    EXPECT_NE(e.hint().find("get_gpt2_vocab.sh"), std::string::npos);
  }
}

// Classical Chinese poems (public domain) for training a small model.
const char* kChinese[] = {
    "床前明月光，疑是地上霜。举头望明月，低头思故乡。",
    "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。",
    "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。",
    "千山鸟飞绝，万径人踪灭。孤舟蓑笠翁，独钓寒江雪。",
    "红豆生南国，春来发几枝。愿君多采撷，此物最相思。",
    "空山不见人，但闻人语响。返景入深林，复照青苔上。",
    "松下问童子，言师采药去。只在此山中，云深不知处。",
    "离离原上草，一岁一枯荣。野火烧不尽，春风吹又生。",
    "慈母手中线，游子身上衣。临行密密缝，意恐迟迟归。",
    "锄禾日当午，汗滴禾下土。谁知盘中餐，粒粒皆辛苦。",
    "向晚意不适，驱车登古原。夕阳无限好，只是近黄昏。",
    "君自故乡来，应知故乡事。来日绮窗前，寒梅著花未。",
};

TEST(SentencePiece, TrainedModelRoundTripsAndMatchesSpmEncode) {
  if (std::system("command -v spm_train >/dev/null && command -v spm_encode >/dev/null") != 0)
    GTEST_SKIP() << "spm_train/spm_encode missing (apt-get install sentencepiece)";
  TempDir dir;
  {
    std::ofstream f(dir / "zh.txt");
    for (int rep = 0; rep < 20; ++rep)
      for (const char* line : kChinese) f << line << "\n";
  }
  const std::string train = fmt::format(
      "spm_train --input={} --model_prefix={} --vocab_size=260 --character_coverage=1.0 "
      "--model_type=bpe --normalization_rule_name=identity --minloglevel=2 > {} 2>&1",
      dir / "zh.txt", dir / "zh", dir / "train.log");
  ASSERT_EQ(std::system(train.c_str()), 0) << read_bytes(dir / "train.log");
  TokenizerConfig c;
  c.type = "SentencePieceTokenizer";
  c.tokenizer_model = dir / "zh.model";
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = make_tokenizer(c);
  } catch (const Error& e) {
    if (e.message().find("without SentencePiece") != std::string::npos) GTEST_SKIP() << e.message();
    throw;
  }
  EXPECT_EQ(tok->vocab_size(), 260);
  EXPECT_EQ(tok->eod(), 2);  // spm_train's default </s>
  // spm_encode is the independent reference for the ids.
  {
    std::ofstream f(dir / "probe.txt");
    f << "床前明月光，春风吹又生。\n" << "白日依山尽 黄河入海流\n";
  }
  ASSERT_EQ(std::system(fmt::format("spm_encode --model={} --output_format=id < {} > {}",
                                    dir / "zh.model", dir / "probe.txt", dir / "ids.txt")
                            .c_str()),
            0);
  std::istringstream ref(read_bytes(dir / "ids.txt"));
  for (const std::string text : {"床前明月光，春风吹又生。", "白日依山尽 黄河入海流"}) {
    std::string line;
    ASSERT_TRUE(std::getline(ref, line));
    std::vector<int32_t> want, got;
    std::istringstream ls(line);
    for (int32_t x; ls >> x;) want.push_back(x);
    tok->encode(text, &got);
    EXPECT_EQ(got, want) << text;
    EXPECT_LT(got.size(), std::string(text).size() / 3);  // pieces longer than one character
    EXPECT_EQ(tok->decode(got), text);
  }
}

}  // namespace
}  // namespace tripod::data
