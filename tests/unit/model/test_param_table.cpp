// Parameter table and optimizer pieces: layout-independent init (a tp
// shard equals the slice of the full tensor), shard/unshard round trips for
// every shard rule, Megatron's scaled init, the LR schedule at hand-computed
// points, and vocab padding.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "base/error.h"
#include "model/gpt_model.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "testing/tiny_model.h"

namespace tripod {
namespace {

config::GptConfig small_config() {
  return testing::tiny_gpt({.num_layers = 2, .hidden_size = 8, .num_attention_heads = 4, .seq_length = 4,
                            .vocab_size = 250});
}

TEST(ParamTable, ShardsAreSlicesOfTheFullTensorForEveryRule) {
  auto be = backend::make_cpu_backend();
  const auto cfg = small_config();
  for (int tp : {1, 2, 4}) {
    const auto specs = model::GptModel::all_param_specs(cfg, cfg.padded_vocab_size(tp));
    for (const auto& spec : specs) {
      Tensor full = model::init_full(spec, 7, 0.02f, cfg.num_layers);
      Tensor rebuilt = Tensor::zeros(spec.global_shape, DType::F32);
      for (int r = 0; r < tp; ++r) {
        model::ParamStore store({spec}, tp, r, *be);
        store.init(7, 0.02f, cfg.num_layers);
        Tensor mine = store.value_to_host(store.params()[0]);
        Tensor expect = model::take_shard(full, spec.shard, tp, r);
        ASSERT_EQ(mine.numel(), expect.numel()) << spec.name;
        for (int64_t i = 0; i < mine.numel(); ++i) ASSERT_EQ(mine.data<float>()[i], expect.data<float>()[i]) << spec.name;
        model::place_shard(rebuilt, mine, spec.shard, tp, r);
      }
      for (int64_t i = 0; i < full.numel(); ++i) ASSERT_EQ(rebuilt.data<float>()[i], full.data<float>()[i]) << spec.name;
    }
  }
}

TEST(ParamTable, QkvShardKeepsHeadsWhole) {
  // Full (3C, C) = [Q | K | V]; with tp = 2 rank 1 holds rows [C/2, C) of each third.
  model::ParamSpec spec{"qkv", {12, 1}, model::ShardDim::QkvRows};
  Tensor full = Tensor::empty({12, 1}, DType::F32);
  for (int i = 0; i < 12; ++i) full.data<float>()[i] = static_cast<float>(i);
  Tensor s = model::take_shard(full, spec.shard, 2, 1);
  const float expect[] = {2, 3, 6, 7, 10, 11};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(s.data<float>()[i], expect[i]);
}

TEST(ParamTable, InitStatistics) {
  const auto cfg = small_config();
  model::ParamSpec w{"decoder.layers.0.mlp.linear_fc1.weight", {512, 256}, model::ShardDim::Rows, model::InitKind::Normal};
  model::ParamSpec o{"decoder.layers.0.mlp.linear_fc2.weight", {512, 256}, model::ShardDim::Cols, model::InitKind::ScaledNormal};
  for (auto* spec : {&w, &o}) {
    Tensor t = model::init_full(*spec, 1, 0.02f, 12);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < t.numel(); ++i) s += t.data<float>()[i], s2 += double(t.data<float>()[i]) * t.data<float>()[i];
    const double mean = s / t.numel(), sd = std::sqrt(s2 / t.numel() - mean * mean);
    const double want = spec == &w ? 0.02 : 0.02 / std::sqrt(24.0);
    EXPECT_NEAR(mean, 0.0, 5 * want / std::sqrt(double(t.numel())));
    EXPECT_NEAR(sd, want, 0.01 * want);
  }
  // Different names give different streams; the same name the same one.
  Tensor a = model::init_full(w, 1, 0.02f, 12), b = model::init_full(o, 1, 1.0f, 12), c = model::init_full(w, 1, 0.02f, 12);
  EXPECT_NE(a.data<float>()[0] * std::sqrt(24.0f) / 0.02f, b.data<float>()[0]);
  EXPECT_EQ(a.data<float>()[5], c.data<float>()[5]);
}

TEST(Config, VocabPaddingAsMegatron) {
  config::GptConfig c = small_config();
  c.vocab_size = 50257;
  EXPECT_EQ(c.padded_vocab_size(1), 50304);
  EXPECT_EQ(c.padded_vocab_size(2), 50432);
  EXPECT_EQ(c.padded_vocab_size(8), 51200);
  // GPT-2 124M: 124,439,808 parameters at vocab 50257 (baselines.md)
  config::GptConfig g;
  g.num_layers = 12; g.hidden_size = 768; g.num_attention_heads = 12; g.seq_length = 1024; g.vocab_size = 50257;
  g.finalize();
  EXPECT_EQ(g.num_parameters(50257), 124439808);
  EXPECT_NEAR(g.flops_per_token() / 1e9, 0.8033, 1e-4);
}

TEST(Config, RejectsHeadsThatDoNotDivideHidden) {
  config::GptConfig c = small_config();
  c.num_attention_heads = 3;
  try {
    c.finalize();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--num-attention-heads"), std::string::npos);
  }
}

TEST(LrSchedule, MegatronWarmupThenCosine) {
  optim::LrSchedule s;
  s.max_lr = 1.0;
  s.min_lr = 0.1;
  s.warmup_iters = 4;
  s.decay_iters = 14;
  s.style = optim::DecayStyle::Cosine;
  EXPECT_DOUBLE_EQ(s.lr_for_iteration(1), 0.0);   // Megatron: first iteration at lr_at(0)
  EXPECT_DOUBLE_EQ(s.lr_for_iteration(3), 0.5);
  EXPECT_DOUBLE_EQ(s.lr_for_iteration(5), 1.0);
  EXPECT_NEAR(s.lr_at(9), 0.1 + 0.9 * 0.5, 1e-12);  // halfway through decay
  EXPECT_DOUBLE_EQ(s.lr_at(14), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(100), 0.1);
  s.style = optim::DecayStyle::Linear;
  EXPECT_NEAR(s.lr_at(6), 0.1 + 0.9 * 0.8, 1e-12);
}

TEST(AdamW, SegmentsMergeAndClipCoefficient) {
  auto m = optim::merge_segments({{0, 4, true}, {4, 2, true}, {6, 3, false}, {9, 1, true}});
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].numel, 6);
  EXPECT_FALSE(m[1].weight_decay);
  EXPECT_FLOAT_EQ(optim::clip_coefficient(2.0, 1.0), static_cast<float>(1.0 / (2.0 + 1e-6)));
  EXPECT_EQ(optim::clip_coefficient(0.5, 1.0), 1.0f);
  EXPECT_EQ(optim::clip_coefficient(5.0, 0.0), 1.0f);
}

}  // namespace
}  // namespace tripod
