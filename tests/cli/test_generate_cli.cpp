// `tripod generate` with the KV cache (generate/inference_context.h) against
// the full recompute (--no-kv-cache) and against one forward of the whole
// generated sequence (--logits-out), through the real binary on CPU, for a
// GPT-2 checkpoint (learned positions, LayerNorm, GELU, biases) and a Llama
// one (RoPE, RMSNorm, SwiGLU, grouped-query attention, untied, no bias):
//   - the same ids, greedy and sampled, for prompts of 1 and 7 tokens, up to
//     the model's last position;
//   - the logits each token was drawn from within 1e-6 of the recompute's,
//     and of the rows of one forward over prompt + generated tokens;
//   - a prompt plus an explicit --max-new-tokens beyond the positions is
//     refused naming the flag and the most that fits; left at its default
//     the count shrinks to fit, with a log line;
//   - the closing line gives tokens/s and what ran (cache, device, dtype).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "comm/proc_util.h"

using namespace tripod::testing;

namespace {

constexpr int kPositions = 24, kVocab = 100;

const std::string kModel =
    " --num-layers 2 --hidden-size 64 --num-attention-heads 8 --seq-length 24 --mock-data --vocab-size 100 "
    "--micro-batch-size 2 --global-batch-size 2 --train-iters 2 --lr 1e-2 --log-interval 1 --eval-interval 0 ";
const std::string kLlama =
    "--group-query-attention --num-query-groups 2 --position-embedding-type rope --normalization RMSNorm --swiglu "
    "--ffn-hidden-size 96 --untie-embeddings-and-output-weights --disable-bias-linear ";

std::vector<float> read_f32(const std::string& path) {
  const std::string b = read_file(path);
  std::vector<float> v(b.size() / sizeof(float));
  std::memcpy(v.data(), b.data(), v.size() * sizeof(float));
  return v;
}

std::vector<int> parse_ids(const std::string& line) {
  std::vector<int> ids;
  std::istringstream in(line);
  for (int x; in >> x;) ids.push_back(x);
  return ids;
}

std::string csv(const std::vector<int>& ids) {
  std::string s;
  for (int x : ids) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

// Largest |a - b| / max(1, |b|).
double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::abs(double(a[i]) - b[i]) / std::max(1.0, std::abs(double(b[i]))));
  return worst;
}

struct Generated {
  std::vector<int> ids;      // the new tokens
  std::vector<float> steps;  // (ids, vocab): the logits each was drawn from
  std::string log;
};

class GenerateCli : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = temp_dir("generate_cli"); }

  void train(const std::string& name, const std::string& flags) {
    const RunResult r = run_shell(tripod_bin() + " train --device cpu" + kModel + flags + "--save " + dir_ + "/" + name, 120);
    ASSERT_EQ(r.code, 0) << r.output;
  }

  Generated gen(const std::string& ck, const std::vector<int>& prompt, const std::string& flags) {
    const std::string steps = dir_ + "/steps.f32", out = dir_ + "/out.txt";
    const RunResult r = run_shell(tripod_bin() + " generate --device cpu --load " + dir_ + "/" + ck + " --prompt-ids " +
                                      csv(prompt) + " --step-logits-out " + steps + " " + flags + " > " + out,
                                  120);
    EXPECT_EQ(r.code, 0) << flags << "\n" << r.output;
    return {parse_ids(read_file(out)), read_f32(steps), r.output};
  }

  // Cache and recompute agree, and both agree with one forward of the whole sequence.
  void check(const std::string& ck, const std::vector<int>& prompt, int new_tokens, const std::string& sampling) {
    SCOPED_TRACE(ck + ", prompt of " + std::to_string(prompt.size()) + ", " + sampling);
    const std::string n = " --max-new-tokens " + std::to_string(new_tokens) + " " + sampling;
    const Generated cached = gen(ck, prompt, n), full = gen(ck, prompt, n + " --no-kv-cache");
    ASSERT_EQ(cached.ids.size(), size_t(new_tokens)) << cached.log;
    EXPECT_EQ(cached.ids, full.ids);
    ASSERT_EQ(cached.steps.size(), size_t(new_tokens) * kVocab);
    ASSERT_EQ(full.steps.size(), cached.steps.size());
    EXPECT_LE(max_rel_diff(cached.steps, full.steps), 1e-6);
    EXPECT_TRUE(contains(cached.log, "tokens/s") && contains(cached.log, "KV cache, cpu, f32")) << cached.log;
    EXPECT_TRUE(contains(full.log, "no KV cache (--no-kv-cache), cpu, f32")) << full.log;
    // One forward over prompt + every new token but the last: its rows from the prompt's last on
    // are the logits of the steps.
    std::vector<int> seq = prompt;
    seq.insert(seq.end(), cached.ids.begin(), cached.ids.end() - 1);
    const std::string whole = dir_ + "/whole.f32";
    const RunResult r = run_shell(tripod_bin() + " generate --device cpu --load " + dir_ + "/" + ck + " --prompt-ids " +
                                      csv(seq) + " --max-new-tokens 0 --logits-out " + whole, 120);
    ASSERT_EQ(r.code, 0) << r.output;
    const std::vector<float> rows = read_f32(whole);
    ASSERT_EQ(rows.size(), seq.size() * kVocab);
    const std::vector<float> tail(rows.end() - static_cast<std::ptrdiff_t>(cached.steps.size()), rows.end());
    EXPECT_LE(max_rel_diff(cached.steps, tail), 1e-6);
  }

  std::string dir_;
};

TEST_F(GenerateCli, KvCacheGivesTheRecomputesIdsAndLogits) {
  train("gpt", "");
  train("llama", kLlama);
  const std::vector<int> one = {7}, seven = {3, 17, 42, 5, 99, 0, 64};
  for (const std::string ck : {"gpt", "llama"}) {
    check(ck, one, kPositions - 1, "--greedy");                  // to the last position
    check(ck, seven, kPositions - 7, "--greedy");                // to the last position
    check(ck, seven, 10, "--temperature 0.8 --top-k 20 --top-p 0.9 --seed 5");
  }
}

TEST_F(GenerateCli, SequenceBeyondThePositionsIsRefusedOrShrunk) {
  train("gpt", "");
  const std::vector<int> seven = {3, 17, 42, 5, 99, 0, 64};
  for (const std::string cache : {"", " --no-kv-cache"}) {
    RunResult r = run_shell(tripod_bin() + " generate --device cpu --load " + dir_ + "/gpt --prompt-ids " + csv(seven) +
                                " --greedy --max-new-tokens 18" + cache, 60);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_TRUE(contains(r.output, "the prompt (7 tokens) + --max-new-tokens 18 = 25 tokens exceed the model's 24 "
                                   "positions")) << r.output;
    EXPECT_TRUE(contains(r.output, "use --max-new-tokens 17 or less")) << r.output;
  }
  // Left at its default (64), the count shrinks to the 17 positions left.
  const Generated g = gen("gpt", seven, "--greedy");
  EXPECT_EQ(g.ids.size(), 17u) << g.log;
  EXPECT_TRUE(contains(g.log, "--max-new-tokens 17: the model's 24 positions less the prompt's 7 tokens")) << g.log;
  std::vector<int> long_prompt(kPositions + 1, 5);
  RunResult r = run_shell(tripod_bin() + " generate --device cpu --load " + dir_ + "/gpt --prompt-ids " +
                              csv(long_prompt) + " --greedy", 60);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "shorten the prompt to at most 23 tokens")) << r.output;
  r = run_shell(tripod_bin() + " generate --device tpu --load " + dir_ + "/gpt --prompt-ids 1", 60);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "pass --device cuda or --device cpu")) << r.output;
}

}  // namespace
