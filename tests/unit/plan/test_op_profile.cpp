// plan/op_profile: the op list of a micro-batch against hand counts of the
// model's FLOPs, the fits against synthetic points they must recover, and
// the op-time file format.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "base/error.h"
#include "plan/op_profile.h"
#include "unit/plan/plan_models.h"

namespace tripod::plan {
namespace {

GptConfig gpt(int64_t L, int64_t C, int64_t NH) { return gpt_model(L, C, NH, 256, 1000); }

// GPT-2 of 4 layers (C 64, 4 heads, seq 256) at tp 2, pp 2, micro-batch 3:
// the last stage's 2 layers, N = 768 rows; layer_fwd is the forward FLOPs
// of their linears (qkv C x 3C, proj C x C, fc1 C x F, fc2 F x C, split by
// tp), head_fwd the LM head's (C x V/2).
struct SmallStage {
  GptConfig m = gpt(4, 64, 4);
  Layout l = layout(4, 2, 2);
  double N = 3 * 256, C = 64, F = 256, V = 0, layers = 2, layer_fwd = 0, head_fwd = 0;
  SmallStage() {
    l.micro_batch = 3;
    V = double(m.padded_vocab_size(2));
    layer_fwd = 2 * N * layers * (3 * C * C + C * C + 2 * C * F) / 2;
    head_fwd = 2 * N * C * V / 2;
  }
};

TEST(OpProfile, LinearAndAttentionFlopsMatchAHandCount) {
  const GptConfig m = gpt(4, 64, 4);
  Layout l = layout(4, 2, 2);
  l.micro_batch = 3;
  const auto ops = micro_batch_ops(m, l);
  const double N = 3 * 256, C = 64, F = 256, V = double(m.padded_vocab_size(2)), layers = 2;
  // Per layer: qkv C x 3C, proj C x C, fc1 C x F, fc2 F x C, all split by tp 2;
  // the LM head C x V/2 once on the last stage.
  const double fwd = 2 * N * (layers * (3 * C * C + C * C + 2 * C * F) / 2 + C * V / 2);
  EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kLinearFwd), fwd);
  EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kLinearBwd), 2 * fwd);
  // Causal attention: 2 B NH T^2 HS per layer forward (half of 4 B NH T^2 HS), heads split by tp.
  const double att = layers * 2 * 3 * (4 / 2) * 256.0 * 256.0 * (64 / 4);
  EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kAttentionFwd), att);
  EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kAttentionBwd), 2.5 * att);

  // Full recompute runs every layer's forward twice; selective the attention core.
  l.recompute = Recompute::Full;
  const auto full = micro_batch_ops(m, l);
  EXPECT_DOUBLE_EQ(sum_work(full, OpKind::kLinearFwd), fwd + 2 * N * layers * (3 * C * C + C * C + 2 * C * F) / 2);
  EXPECT_DOUBLE_EQ(sum_work(full, OpKind::kAttentionFwd), 2 * att);
  l.recompute = Recompute::Selective;
  const auto sel = micro_batch_ops(m, l);
  EXPECT_DOUBLE_EQ(sum_work(sel, OpKind::kLinearFwd), fwd);
  EXPECT_DOUBLE_EQ(sum_work(sel, OpKind::kAttentionFwd), 2 * att);
}

// --fp8-format: the FP8 layers' linears become the FP8 kinds with the same
// shapes and FLOPs; --first-last-layers-bf16 keeps layers 0 and L-1 in the
// bf16 kinds. GPT-2 of 4 layers at pp 2: the last stage holds layers 2, 3,
// so with the bf16 first and last layers half its linears are FP8. The
// step casts each FP8 weight once (qkv 3C x C, proj, fc1, fc2 at tp 2).
TEST(OpProfile, Fp8LayersRunTheFp8Kinds) {
  SmallStage st;
  st.m.fp8.format = config::Fp8Format::Hybrid;
  EXPECT_DOUBLE_EQ(fp8_layer_share(st.m, st.l), 1.0);
  auto ops = micro_batch_ops(st.m, st.l);
  EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kFp8LinearFwd), st.layer_fwd);
  EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kFp8LinearBwd), 2 * st.layer_fwd);
  EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kLinearFwd), st.head_fwd);  // the output layer stays bf16
  auto weight_casts = [&](const std::vector<OpCount>& steps) {
    double elements = 0;
    for (const auto& c : steps)
      if (c.op.kind == OpKind::kFp8WeightCast) elements += c.count * double(c.op.d[0] * c.op.d[1]);
    return elements;
  };
  EXPECT_DOUBLE_EQ(weight_casts(step_ops(st.m, st.l)), st.layers * (3 * st.C * st.C + st.C * st.C + 2 * st.C * st.F) / 2);
  st.m.fp8.first_last_layers_bf16 = true;
  EXPECT_DOUBLE_EQ(fp8_layer_share(st.m, st.l), 0.5);
  ops = micro_batch_ops(st.m, st.l);
  EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kFp8LinearFwd), st.layer_fwd / 2);
  EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kLinearFwd), st.layer_fwd / 2 + st.head_fwd);
  EXPECT_DOUBLE_EQ(weight_casts(step_ops(st.m, st.l)), st.layers / 2 * (3 * st.C * st.C + st.C * st.C + 2 * st.C * st.F) / 2);
  st.m.fp8.format = config::Fp8Format::None;
  EXPECT_DOUBLE_EQ(weight_casts(step_ops(st.m, st.l)), 0.0);
  EXPECT_DOUBLE_EQ(sum_work(micro_batch_ops(st.m, st.l), OpKind::kFp8LinearFwd), 0.0);
}

// A profile that timed only bf16 linears (the shipped one, a cache from
// before FP8) takes an FP8 linear at kFp8GemmSpeedup times the bf16 fit's
// rate; once FP8 linears are timed, their own fit.
TEST(OpProfile, Fp8LinearWithoutItsFitTakesTheBf16FitAtTheFp8Gain) {
  OpProfile p;
  const double rate = 5e14, over = 7e-6, fp8_rate = 9e14;
  OpShape o;
  for (int64_t n : {1024, 4096}) {
    o.kind = OpKind::kLinearFwd;
    o.d[0] = n, o.d[1] = 768, o.d[2] = 2304;
    p.measured[o.key()] = o.work() / rate + over;
  }
  p.refit();
  OpShape f;
  f.kind = OpKind::kFp8LinearBwd;
  f.d[0] = 2048, f.d[1] = 768, f.d[2] = 3072;
  bool ok = true;
  EXPECT_NEAR(p.seconds(f, &ok), f.work() / (rate * kFp8GemmSpeedup) + over, 1e-15);
  EXPECT_TRUE(ok);
  for (int64_t n : {1024, 8192}) {
    o.kind = OpKind::kFp8LinearFwd;
    o.d[0] = n;
    p.measured[o.key()] = o.work() / fp8_rate;
  }
  p.refit();
  EXPECT_NEAR(p.seconds(f) / (f.work() / fp8_rate), 1.0, 1e-9);
  EXPECT_EQ(parse_op_key(f.key())->kind, OpKind::kFp8LinearBwd);  // the key names the kind
}

// --fp8-recipe blockwise: the same linears as the block-scaled kinds, op
// for op: every per-tensor FP8 op of the delayed run has a block-scaled
// twin with its dimensions and count, and no per-tensor FP8 op is left.
// By hand for GPT-2 of 4 layers at tp 2, pp 2, micro-batch 3 (N = 768 rows,
// the last stage's 2 layers): qkv (768, 64, 96), proj (768, 32, 64), fc1
// (768, 64, 128, GELU), fc2 (768, 128, 64), once each per layer forward and
// backward; the weights cast once per step, (96, 64), (64, 32), (128, 64),
// (64, 128), 2 layers each.
TEST(OpProfile, Fp8BlockwiseLayersRunTheBlockKinds) {
  GptConfig m = gpt(4, 64, 4);
  Layout l = layout(4, 2, 2);
  l.micro_batch = 3;
  m.fp8.format = config::Fp8Format::Hybrid;
  const auto delayed = micro_batch_ops(m, l), delayed_step = step_ops(m, l);
  m.fp8.recipe = config::Fp8Recipe::Blockwise;
  const auto block = micro_batch_ops(m, l), block_step = step_ops(m, l);
  auto count = [](const std::vector<OpCount>& ops, OpKind k, int64_t a, int64_t b, int64_t c = 0, int64_t d = 0) {
    for (const auto& o : ops)
      if (o.op.kind == k && o.op.d[0] == a && o.op.d[1] == b && o.op.d[2] == c && o.op.d[3] == d) return o.count;
    return 0.0;
  };
  for (auto [fwd, bwd] : {std::pair{OpKind::kFp8LinearFwd, OpKind::kFp8LinearBwd},
                          std::pair{OpKind::kFp8BlockLinearFwd, OpKind::kFp8BlockLinearBwd}}) {
    const auto& ops = fwd == OpKind::kFp8LinearFwd ? delayed : block;
    EXPECT_DOUBLE_EQ(count(ops, fwd, 768, 64, 96), 2.0);
    EXPECT_DOUBLE_EQ(count(ops, fwd, 768, 32, 64), 2.0);
    EXPECT_DOUBLE_EQ(count(ops, fwd, 768, 64, 128, 1), 2.0);
    EXPECT_DOUBLE_EQ(count(ops, fwd, 768, 128, 64), 2.0);
    EXPECT_DOUBLE_EQ(count(ops, bwd, 768, 64, 96), 2.0);
    EXPECT_DOUBLE_EQ(count(ops, bwd, 768, 32, 64), 2.0);
    EXPECT_DOUBLE_EQ(count(ops, bwd, 768, 64, 128), 2.0);
    EXPECT_DOUBLE_EQ(count(ops, bwd, 768, 128, 64, 1), 2.0);
  }
  for (auto [k, ops] : {std::pair{OpKind::kFp8WeightCast, &delayed_step},
                        std::pair{OpKind::kFp8BlockWeightCast, &block_step}})
    for (auto [o, i] : {std::pair{96, 64}, std::pair{64, 32}, std::pair{128, 64}, std::pair{64, 128}})
      EXPECT_DOUBLE_EQ(count(*ops, k, o, i), 2.0) << o << "x" << i;
  // Twin for twin; the rest (norms, attention, the bf16 head) unchanged.
  auto twin = [](OpKind k) {
    switch (k) {
      case OpKind::kFp8LinearFwd: return OpKind::kFp8BlockLinearFwd;
      case OpKind::kFp8LinearBwd: return OpKind::kFp8BlockLinearBwd;
      case OpKind::kFp8WeightCast: return OpKind::kFp8BlockWeightCast;
      default: return k;
    }
  };
  for (auto [from, to] : {std::pair{&delayed, &block}, std::pair{&delayed_step, &block_step}}) {
    ASSERT_EQ(from->size(), to->size());
    for (const auto& o : *from) {
      EXPECT_DOUBLE_EQ(count(*to, twin(o.op.kind), o.op.d[0], o.op.d[1], o.op.d[2], o.op.d[3]), o.count)
          << o.op.key();
      if (twin(o.op.kind) != o.op.kind)
        EXPECT_DOUBLE_EQ(count(*to, o.op.kind, o.op.d[0], o.op.d[1], o.op.d[2], o.op.d[3]), 0.0) << o.op.key();
    }
  }
  EXPECT_DOUBLE_EQ(sum_work(block, OpKind::kFp8BlockLinearFwd), sum_work(delayed, OpKind::kFp8LinearFwd));
  EXPECT_DOUBLE_EQ(sum_work(block, OpKind::kFp8BlockLinearBwd), sum_work(delayed, OpKind::kFp8LinearBwd));
  // --first-last-layers-bf16 splits them as it splits the per-tensor kinds.
  m.fp8.first_last_layers_bf16 = true;
  EXPECT_DOUBLE_EQ(count(micro_batch_ops(m, l), OpKind::kFp8BlockLinearFwd, 768, 64, 96), 1.0);
  EXPECT_DOUBLE_EQ(count(micro_batch_ops(m, l), OpKind::kLinearFwd, 768, 64, 96), 1.0);
  EXPECT_DOUBLE_EQ(count(step_ops(m, l), OpKind::kFp8BlockWeightCast, 96, 64), 1.0);
}

// --no-fp8-wgrad: an FP8 linear's backward is its FP8 dgrad, listed as the
// FP8 forward kind of shape (rows, out -> in), and its bf16 wgrad, half a
// linear_bwd of its shape without GELU. By hand for GPT-2 of 4 layers at
// tp 2, pp 2, micro-batch 3 (N = 768, the last stage's 2 layers; as
// Fp8BlockwiseLayersRunTheBlockKinds): the forwards as before, qkv (768,
// 64, 96), proj (768, 32, 64), fc1 (768, 64, 128, GELU), fc2 (768, 128, 64);
// the dgrads qkv (768, 96, 64), proj (768, 64, 32), fc1 (768, 128, 64) and
// fc2 (768, 64, 128, GELU backward), the last two the same ops as fc2's and
// fc1's forwards, so 4 calls of those; the wgrads linear_bwd (768, 64, 96),
// (768, 32, 64), (768, 64, 128), (768, 128, 64), 2 layers x 1/2; no FP8
// backward kind. The FLOPs: 2 layer forwards' worth in the FP8 forward
// kind, one in the bf16 backward (the wgrads' 2 N in out each) besides the
// head's; the linears' total as with FP8 wgrad. The weight casts as before.
TEST(OpProfile, Fp8HighPrecisionWgradSplitsTheBackward) {
  SmallStage st;
  st.m.fp8.format = config::Fp8Format::Hybrid;
  const auto fp8_wgrad = micro_batch_ops(st.m, st.l), fp8_wgrad_step = step_ops(st.m, st.l);
  st.m.fp8.high_precision_wgrad = true;
  auto count = [](const std::vector<OpCount>& ops, OpKind k, int64_t a, int64_t b, int64_t c = 0, int64_t d = 0) {
    for (const auto& o : ops)
      if (o.op.kind == k && o.op.d[0] == a && o.op.d[1] == b && o.op.d[2] == c && o.op.d[3] == d) return o.count;
    return 0.0;
  };
  for (bool blockwise : {false, true}) {
    SCOPED_TRACE(blockwise ? "blockwise" : "delayed");
    st.m.fp8.recipe = blockwise ? config::Fp8Recipe::Blockwise : config::Fp8Recipe::Delayed;
    const OpKind fwd = blockwise ? OpKind::kFp8BlockLinearFwd : OpKind::kFp8LinearFwd;
    const OpKind bwd = blockwise ? OpKind::kFp8BlockLinearBwd : OpKind::kFp8LinearBwd;
    const auto ops = micro_batch_ops(st.m, st.l);
    EXPECT_DOUBLE_EQ(count(ops, fwd, 768, 64, 96), 2.0);        // qkv forward
    EXPECT_DOUBLE_EQ(count(ops, fwd, 768, 32, 64), 2.0);        // proj forward
    EXPECT_DOUBLE_EQ(count(ops, fwd, 768, 64, 128, 1), 4.0);    // fc1 forward, fc2 dgrad + GELU backward
    EXPECT_DOUBLE_EQ(count(ops, fwd, 768, 128, 64), 4.0);       // fc2 forward, fc1 dgrad
    EXPECT_DOUBLE_EQ(count(ops, fwd, 768, 96, 64), 2.0);        // qkv dgrad
    EXPECT_DOUBLE_EQ(count(ops, fwd, 768, 64, 32), 2.0);        // proj dgrad
    EXPECT_DOUBLE_EQ(count(ops, OpKind::kLinearBwd, 768, 64, 96), 1.0);   // the wgrads
    EXPECT_DOUBLE_EQ(count(ops, OpKind::kLinearBwd, 768, 32, 64), 1.0);
    EXPECT_DOUBLE_EQ(count(ops, OpKind::kLinearBwd, 768, 64, 128), 1.0);
    EXPECT_DOUBLE_EQ(count(ops, OpKind::kLinearBwd, 768, 128, 64), 1.0);
    EXPECT_DOUBLE_EQ(count(ops, OpKind::kLinearBwd, 768, 128, 64, 1), 0.0);
    EXPECT_DOUBLE_EQ(sum_work(ops, bwd), 0.0);
    EXPECT_DOUBLE_EQ(sum_work(ops, fwd), 2 * st.layer_fwd);
    EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kLinearBwd), st.layer_fwd + 2 * st.head_fwd);
    EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kLinearFwd), st.head_fwd);
    const auto step = step_ops(st.m, st.l);
    ASSERT_EQ(step.size(), fp8_wgrad_step.size());
    for (size_t i = 0; i < step.size(); ++i) {
      EXPECT_EQ(step[i].op.key().substr(step[i].op.key().find(' ')),
                fp8_wgrad_step[i].op.key().substr(fp8_wgrad_step[i].op.key().find(' ')));
      EXPECT_DOUBLE_EQ(step[i].count, fp8_wgrad_step[i].count);
    }
  }
  // The rest of the list (norms, attention, the residual add, the head) as with FP8 wgrad.
  st.m.fp8.recipe = config::Fp8Recipe::Delayed;
  const auto ops = micro_batch_ops(st.m, st.l);
  for (const auto& o : fp8_wgrad)
    if (o.op.op_class() != OpClass::kFp8Linear)
      EXPECT_DOUBLE_EQ(count(ops, o.op.kind, o.op.d[0], o.op.d[1], o.op.d[2], o.op.d[3]), o.count) << o.op.key();
  // --first-last-layers-bf16: layer 3 in bf16, layer 2 in FP8: qkv's
  // linear_bwd once for the bf16 layer, a half for the FP8 layer's wgrad.
  st.m.fp8.first_last_layers_bf16 = true;
  EXPECT_DOUBLE_EQ(count(micro_batch_ops(st.m, st.l), OpKind::kLinearBwd, 768, 64, 96), 1.5);
  EXPECT_DOUBLE_EQ(count(micro_batch_ops(st.m, st.l), OpKind::kFp8LinearFwd, 768, 96, 64), 1.0);
  EXPECT_DOUBLE_EQ(count(micro_batch_ops(st.m, st.l), OpKind::kFp8LinearFwd, 768, 64, 96), 1.0);

  // Timed by a profile of a bf16 linear fit alone (the FP8 linears at 1.6x
  // its rate): per FP8 linear the backward was 4 N in out / (1.6 R) + o, is
  // 2 N in out / (1.6 R) + o (dgrad) + (4 N in out / R + o) / 2 (wgrad):
  // over the stage's 2 x 4 linears, layer_fwd (1 - 1/1.6) / R + 8 x o / 2 more.
  OpProfile p;
  const double rate = 5e14, over = 7e-6;
  OpShape o;
  o.kind = OpKind::kLinearFwd;
  o.d[1] = 768, o.d[2] = 2304;
  for (int64_t n : {1024, 4096}) {
    o.d[0] = n;
    p.measured[o.key()] = o.work() / rate + over;
  }
  p.refit();
  st.m.fp8.first_last_layers_bf16 = false;
  EXPECT_NEAR(p.seconds_of(ops) - p.seconds_of(fp8_wgrad), st.layer_fwd * (1 - 1 / 1.6) / rate + 4 * over, 1e-12);
}

// The block-scaled kinds: keys of their own that parse back, their class,
// and their work: the linears' FLOPs as the per-tensor ones'; the weight
// cast's bytes plus the tiles' f32 inverse scales. A qkv weight (2304,
// 768) in bf16: 4 x 2304 x 768 = 7,077,888 bytes of bf16 read and codes
// written, plus 4 x (18 x 8 + 6 x 20) = 1,056 bytes of scales (18 tiles of
// rows x fp8_tile_ld(768) = 8, 6 x fp8_tile_ld(2304) = 20).
TEST(OpProfile, BlockKindsHaveKeysOfTheirOwn) {
  const OpKind kinds[] = {OpKind::kFp8LinearFwd,      OpKind::kFp8LinearBwd,      OpKind::kFp8WeightCast,
                          OpKind::kFp8BlockLinearFwd, OpKind::kFp8BlockLinearBwd, OpKind::kFp8BlockWeightCast};
  std::set<std::string> keys;
  for (OpKind k : kinds) {
    OpShape o;
    o.kind = k;
    o.d[0] = 8192, o.d[1] = 768, o.d[2] = k == OpKind::kFp8WeightCast || k == OpKind::kFp8BlockWeightCast ? 0 : 3072;
    o.d[3] = k == OpKind::kFp8BlockLinearFwd ? 1 : 0;
    const auto back = parse_op_key(o.key());
    ASSERT_TRUE(back.has_value()) << o.key();
    EXPECT_EQ(back->kind, k) << o.key();
    EXPECT_EQ(back->key(), o.key());
    for (int i = 0; i < 4; ++i) EXPECT_EQ(back->d[i], o.d[i]) << o.key();
    keys.insert(o.key().substr(0, o.key().find(' ')));
  }
  EXPECT_EQ(keys.size(), 6u);  // six names
  EXPECT_TRUE(keys.count("fp8_block_linear_fwd") && keys.count("fp8_block_linear_bwd") &&
              keys.count("fp8_block_weight_cast"));
  // An older file's key still names the per-tensor kind.
  EXPECT_EQ(parse_op_key("fp8_linear_fwd 8192x768x3072 16bit")->kind, OpKind::kFp8LinearFwd);
  EXPECT_FALSE(parse_op_key("fp8_block_linear 8192x768x3072 16bit").has_value());

  OpShape f;
  f.kind = OpKind::kFp8BlockLinearFwd;
  f.d[0] = 8192, f.d[1] = 768, f.d[2] = 3072;
  EXPECT_EQ(f.op_class(), OpClass::kFp8BlockLinear);
  EXPECT_DOUBLE_EQ(f.work(), 2.0 * 8192 * 768 * 3072);
  f.kind = OpKind::kFp8BlockLinearBwd;
  EXPECT_EQ(f.op_class(), OpClass::kFp8BlockLinear);
  EXPECT_DOUBLE_EQ(f.work(), 4.0 * 8192 * 768 * 3072);
  OpShape w;
  w.kind = OpKind::kFp8BlockWeightCast;
  w.d[0] = 2304, w.d[1] = 768;
  EXPECT_EQ(w.op_class(), OpClass::kMemory);
  EXPECT_DOUBLE_EQ(w.work(), 7077888.0 + 1056.0);
  w.kind = OpKind::kFp8WeightCast;
  EXPECT_DOUBLE_EQ(w.work(), 7077888.0);
}

// A profile without block-scaled measurements takes a block-scaled linear
// at kFp8BlockGemmSpeedup (1.4) times the bf16 fit's rate, even when the
// per-tensor FP8 linears have their own fit; once block-scaled linears are
// measured, their own fit (a class apart from the per-tensor one's). Such
// a profile writes its fit and reads back; an older file without it still
// reads.
TEST(OpProfile, BlockLinearWithoutItsFitTakesTheBf16FitAtTheBlockGain) {
  EXPECT_DOUBLE_EQ(kFp8BlockGemmSpeedup, 1.4);
  OpProfile p;
  p.device = "NVIDIA H100";
  p.tripod_version = tripod_version();
  const double rate = 5e14, over = 7e-6, fp8_rate = 9e14, block_rate = 7.5e14;
  OpShape o;
  o.d[1] = 768, o.d[2] = 2304;
  for (int64_t n : {1024, 4096}) {
    o.kind = OpKind::kLinearFwd;
    o.d[0] = n;
    p.measured[o.key()] = o.work() / rate + over;
    o.kind = OpKind::kFp8LinearFwd;
    p.measured[o.key()] = o.work() / fp8_rate;
  }
  p.refit();
  const std::string old_file = p.to_json();
  OpShape f;
  f.kind = OpKind::kFp8BlockLinearBwd;
  f.d[0] = 2048, f.d[1] = 768, f.d[2] = 3072;
  bool ok = true;
  EXPECT_NEAR(p.seconds(f, &ok), f.work() / (rate * 1.4) + over, 1e-15);
  EXPECT_TRUE(ok);
  OpShape t = f;  // its per-tensor twin: the per-tensor fit
  t.kind = OpKind::kFp8LinearBwd;
  EXPECT_NEAR(p.seconds(t) / (t.work() / fp8_rate), 1.0, 1e-9);
  EXPECT_GT(p.seconds(f), p.seconds(t));
  for (int64_t n : {1024, 8192}) {
    o.kind = OpKind::kFp8BlockLinearFwd;
    o.d[0] = n;
    p.measured[o.key()] = o.work() / block_rate;
  }
  p.refit();
  ASSERT_EQ(p.fits.count(OpClass::kFp8BlockLinear), 1u);
  EXPECT_EQ(p.fits.at(OpClass::kFp8BlockLinear).points, 2);
  EXPECT_EQ(p.fits.at(OpClass::kFp8Linear).points, 2);
  EXPECT_NEAR(p.seconds(f) / (f.work() / block_rate), 1.0, 1e-9);
  EXPECT_NEAR(p.seconds(t) / (t.work() / fp8_rate), 1.0, 1e-9);

  const OpProfile q = OpProfile::from_json(p.to_json(), "new.json");
  EXPECT_EQ(q.measured, p.measured);
  EXPECT_DOUBLE_EQ(q.fits.at(OpClass::kFp8BlockLinear).rate, p.fits.at(OpClass::kFp8BlockLinear).rate);
  const OpProfile old = OpProfile::from_json(old_file, "old.json");
  EXPECT_EQ(old.fits.count(OpClass::kFp8BlockLinear), 0u);
  EXPECT_NEAR(old.seconds(f), f.work() / (rate * 1.4) + over, 1e-15);
}

TEST(OpProfile, SequenceParallelShardsTheNormRows) {
  const GptConfig m = gpt(2, 64, 4);
  Layout l = layout(2, 2);
  l.micro_batch = 2;
  auto rows_of_norm = [&](const Layout& lay) {
    for (const auto& c : micro_batch_ops(m, lay))
      if (c.op.kind == OpKind::kNormFwd) return c.op.d[0];
    return int64_t(-1);
  };
  EXPECT_EQ(rows_of_norm(l), 512);
  l.sequence_parallel = true;
  EXPECT_EQ(rows_of_norm(l), 256);
}

TEST(OpProfile, OptimizerShardFollowsTheDistributedOptimizer) {
  const GptConfig m = gpt(2, 64, 4);
  Layout l = layout(4);
  const int64_t p = params_on_stage(m, 1, 1, 0);
  EXPECT_EQ(step_ops(m, l)[0].op.d[0], p);
  l.distributed_optimizer = true;
  EXPECT_EQ(step_ops(m, l)[0].op.d[0], (p + 3) / 4);
}

TEST(OpProfile, RefitRecoversRateAndOverheadAndMeasuredTimesWin) {
  OpProfile p;
  const double rate = 5e14, over = 7e-6;
  for (int64_t n : {1024, 4096, 16384}) {
    OpShape o;
    o.kind = OpKind::kLinearFwd;
    o.d[0] = n, o.d[1] = 768, o.d[2] = 2304;
    p.measured[o.key()] = o.work() / rate + over;
  }
  p.refit();
  ASSERT_EQ(p.fits.at(OpClass::kLinear).points, 3);
  EXPECT_NEAR(p.fits.at(OpClass::kLinear).rate / rate, 1.0, 1e-9);
  EXPECT_NEAR(p.fits.at(OpClass::kLinear).overhead_s, over, 1e-12);

  OpShape other;  // not measured: the fit
  other.kind = OpKind::kLinearBwd;
  other.d[0] = 2048, other.d[1] = 768, other.d[2] = 768;
  EXPECT_NEAR(p.seconds(other), other.work() / rate + over, 1e-15);
  p.measured[other.key()] = 1.0;  // measured: that number
  EXPECT_EQ(p.seconds(other), 1.0);
  OpShape att;  // no fit of its class
  att.kind = OpKind::kAttentionFwd;
  att.d[0] = 1, att.d[1] = 64, att.d[2] = 2, att.d[3] = 32;
  bool ok = true;
  EXPECT_EQ(p.seconds(att, &ok), 0.0);
  EXPECT_FALSE(ok);
}

TEST(OpProfile, FileRoundTripsAndBadFilesNameThemselves) {
  OpProfile p;
  p.device = "NVIDIA H200";
  p.tripod_version = tripod_version();
  OpShape o;
  o.kind = OpKind::kAttentionBwd;
  o.d[0] = 8, o.d[1] = 1024, o.d[2] = 12, o.d[3] = 64;
  p.measured[o.key()] = 1.5e-4;
  p.refit();
  const OpProfile q = OpProfile::from_json(p.to_json(), "x.json");
  EXPECT_EQ(q.device, p.device);
  EXPECT_EQ(q.measured, p.measured);
  EXPECT_DOUBLE_EQ(q.fits.at(OpClass::kAttentionBwd).rate, p.fits.at(OpClass::kAttentionBwd).rate);

  try {
    OpProfile::from_json("{\"format\": 1, \"device\": 3", "/tmp/broken.json");
    FAIL() << "malformed JSON accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/tmp/broken.json"), std::string::npos) << e.what();
  }
  EXPECT_THROW(OpProfile::from_json("{\"format\": 99}", "f.json"), Error);

  // The cache is keyed by device and version: another version is ignored.
  const std::string dir = ::testing::TempDir() + "op_profile_cache";
  std::filesystem::remove_all(dir);
  ::setenv("TRIPOD_CACHE_DIR", dir.c_str(), 1);
  const std::string path = calibration_cache_path("NVIDIA H200");
  EXPECT_EQ(path, dir + "/plan/nvidia_h200.json");
  save_calibration(path, p);
  std::string why;
  ASSERT_TRUE(load_calibration(path, "NVIDIA H200", &why).has_value()) << why;
  EXPECT_FALSE(load_calibration(path, "NVIDIA H100", &why).has_value());
  p.tripod_version = "0.0.1+gdeadbeef";
  save_calibration(path, p);
  EXPECT_FALSE(load_calibration(path, "NVIDIA H200", &why).has_value());
  EXPECT_NE(why.find("0.0.1+gdeadbeef"), std::string::npos) << why;
  ::unsetenv("TRIPOD_CACHE_DIR");
}

TEST(OpProfile, ShippedH200CoversEveryOpClass) {
  const auto p = shipped_profile("NVIDIA H200");
  ASSERT_TRUE(p.has_value());
  const GptConfig m = gpt(12, 768, 12);
  Layout l = layout(1);
  l.micro_batch = 8;
  bool ok = true;
  const double t = p->seconds_of(micro_batch_ops(m, l), &ok) + p->seconds_of(step_ops(m, l), &ok);
  EXPECT_TRUE(ok);
  EXPECT_GT(t, 0);
  EXPECT_FALSE(shipped_profile("NVIDIA B200").has_value());
}

}  // namespace
}  // namespace tripod::plan
