// tripod plan's count of --fp8-dot-product-attention (plan::Fp8Bytes)
// against hand-computed values for GPT-2 124M (N = 4096 at micro-batch 4,
// C 768, Q 2304): per FP8 layer and micro-batch in flight the FP8
// attention's kept qkv8 and att8, N (Q + C) / t bytes; in the scratch the
// backward's dout and dqkv codes, N (C + Q) / t, and under recompute the
// workspace's qkv8 and att8 as well. The search refuses its layouts with
// context parallelism. Time: the FP8 layers' attention cores are the
// kFp8Attention* ops (their own fit, or the bf16 attention's at the
// measured gains), the FLOP model takes the same gains, and --calibrate
// times them with the real op on the CPU backend.
#include <gtest/gtest.h>

#include <set>

#include "backend/cpu/cpu_backend.h"
#include "plan/calibrate.h"
#include "plan/memory_model.h"
#include "plan/op_profile.h"
#include "plan/search.h"
#include "plan/time_model.h"
#include "unit/plan/plan_models.h"

namespace tripod::plan {
namespace {

GptConfig fp8_gpt2(bool dpa) {
  GptConfig m = gpt2_124m();
  m.fp8.format = config::Fp8Format::Hybrid;
  m.fp8.dot_product_attention = dpa;
  return m;
}

TEST(PlanMemory, Fp8AttentionHandCount) {
  // 4096 x (2304 + 768) = 12,582,912 bytes per FP8 layer: qkv8 (4096 x
  // 2304) and att8 (4096 x 768), one byte per code.
  const Fp8Bytes plain = tripod_fp8_bytes(fp8_gpt2(false), 4, 1, Recompute::None, 0, 12);
  Fp8Bytes f = tripod_fp8_bytes(fp8_gpt2(true), 4, 1, Recompute::None, 0, 12);
  EXPECT_DOUBLE_EQ(f.per_microbatch - plain.per_microbatch, 12 * 12582912.0);
  EXPECT_DOUBLE_EQ(f.per_microbatch, 12 * (22020160.0 + 12582912.0));  // with the linears' kept transposes
  EXPECT_DOUBLE_EQ(f.scratch - plain.scratch, 12582912.0);             // dout (4096 x 768) + dqkv (4096 x 2304)
  EXPECT_DOUBLE_EQ(f.weights, plain.weights);
  // Selective recompute: the attention is recomputed into the workspace, nothing kept.
  for (Recompute r : {Recompute::Selective, Recompute::Full}) {
    const Fp8Bytes p = tripod_fp8_bytes(fp8_gpt2(false), 4, 1, r, 0, 12);
    f = tripod_fp8_bytes(fp8_gpt2(true), 4, 1, r, 0, 12);
    EXPECT_DOUBLE_EQ(f.per_microbatch, p.per_microbatch) << int(r);
    EXPECT_DOUBLE_EQ(f.scratch - p.scratch, 2 * 12582912.0) << int(r);
  }
  // tp 2: each rank holds half the heads: 4096 x (1152 + 384) = 6,291,456.
  f = tripod_fp8_bytes(fp8_gpt2(true), 4, 2, Recompute::None, 0, 1);
  EXPECT_DOUBLE_EQ(f.per_microbatch - tripod_fp8_bytes(fp8_gpt2(false), 4, 2, Recompute::None, 0, 1).per_microbatch,
                   6291456.0);
  // --first-last-layers-bf16: 10 FP8 layers, 10 FP8 attentions; a chunk of layer 0 alone has none.
  GptConfig m = fp8_gpt2(true);
  m.fp8.first_last_layers_bf16 = true;
  EXPECT_DOUBLE_EQ(tripod_fp8_bytes(m, 4, 1, Recompute::None, 0, 12).per_microbatch,
                   10 * (22020160.0 + 12582912.0));
  EXPECT_DOUBLE_EQ(tripod_fp8_bytes(m, 4, 1, Recompute::None, 0, 1).scratch, 0.0);
  // Without --fp8-format the flag adds nothing (the config refuses it; the count stays 0).
  GptConfig bf16 = gpt2_124m();
  bf16.fp8.dot_product_attention = true;
  EXPECT_DOUBLE_EQ(tripod_fp8_bytes(bf16, 4, 1, Recompute::None, 0, 12).per_microbatch, 0.0);
}

TEST(PlanMemory, Fp8AttentionInTheEstimate) {
  // One GPU, micro-batch 4: one micro-batch in flight. The kept FP8 qkv and
  // output (12,582,912 bytes a layer) take the place of their bf16 copies
  // (twice that: NOTE [FP8 attention keeps its codes]), so the activations
  // shrink by 12,582,912 bytes a layer.
  Layout l = layout(1);
  l.micro_batch = 4, l.global_batch = 4;
  const MemoryBreakdown a = estimate_memory(fp8_gpt2(false), l), b = estimate_memory(fp8_gpt2(true), l);
  EXPECT_DOUBLE_EQ(b.activations - a.activations, -12 * 12582912.0);
  EXPECT_DOUBLE_EQ(tripod_fp8_bytes(fp8_gpt2(true), 4, 1, Recompute::None, 0, 12).attention_act_saved,
                   12 * 2 * 12582912.0);
  EXPECT_DOUBLE_EQ(tripod_fp8_bytes(fp8_gpt2(true), 4, 1, Recompute::Selective, 0, 12).attention_act_saved, 0.0);
  EXPECT_DOUBLE_EQ(b.workspace - a.workspace, 12582912.0);
  EXPECT_DOUBLE_EQ(b.model_states, a.model_states);
}

// With --no-fp8-wgrad the projection's bf16 weight gradient reads the
// compute-dtype attention output, so the layer keeps its bf16 qkv and
// output as well as the FP8 codes (NOTE [FP8 attention keeps its codes]):
// nothing saved, and per micro-batch only the codes, 12 x 12,582,912, on
// top of the bf16 activations (no input transposes).
TEST(PlanMemory, Fp8AttentionWithHighPrecisionWgradKeepsTheBf16Copies) {
  GptConfig m = fp8_gpt2(true);
  m.fp8.high_precision_wgrad = true;
  const Fp8Bytes f = tripod_fp8_bytes(m, 4, 1, Recompute::None, 0, 12);
  EXPECT_DOUBLE_EQ(f.attention_act_saved, 0.0);
  EXPECT_DOUBLE_EQ(f.per_microbatch, 12 * 12582912.0);
  GptConfig no_dpa = fp8_gpt2(false);  // the attention's scratch comes on top of --no-fp8-wgrad's own
  no_dpa.fp8.high_precision_wgrad = true;
  EXPECT_DOUBLE_EQ(f.scratch - tripod_fp8_bytes(no_dpa, 4, 1, Recompute::None, 0, 12).scratch, 12582912.0);
  Layout l = layout(1);
  l.micro_batch = 4, l.global_batch = 4;
  EXPECT_DOUBLE_EQ(estimate_memory(m, l).activations - estimate_memory(gpt2_124m(), l).activations,
                   12 * 12582912.0);
}

TEST(PlanSearch, Fp8AttentionNotWithContextParallelism) {
  Machine mc;
  mc.gpus_per_node = 2;
  Layout l{config::Layout::make(2, 1, 1, 1, 2)};
  l.micro_batch = 1, l.global_batch = 8;
  EXPECT_EQ(layout_rule_violation(fp8_gpt2(false), mc, l, false), "");
  EXPECT_NE(layout_rule_violation(fp8_gpt2(true), mc, l, false).find("--fp8-dot-product-attention"),
            std::string::npos);
}

// GPT-2 124M at micro-batch 4: per layer the causal attention forward is
// 2 B NH T^2 HS = 2 x 4 x 12 x 1024^2 x 64 FLOPs, its backward 2.5 times
// that. Under the flag the FP8 layers' cores are the FP8 kinds with those
// FLOPs; --first-last-layers-bf16 leaves layers 0 and 11 on the bf16 kinds;
// selective recompute runs each layer's core forward twice, in its kind.
TEST(PlanTime, Fp8AttentionLayersRunTheFp8AttentionKinds) {
  Layout l = layout(1);
  l.micro_batch = 4, l.global_batch = 4;
  const double att = 2.0 * 4 * 12 * 1024.0 * 1024.0 * 64;
  auto ops = micro_batch_ops(fp8_gpt2(true), l);
  EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kFp8AttentionFwd), 12 * att);
  EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kFp8AttentionBwd), 12 * 2.5 * att);
  EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kAttentionFwd), 0.0);
  EXPECT_DOUBLE_EQ(sum_work(micro_batch_ops(fp8_gpt2(false), l), OpKind::kFp8AttentionFwd), 0.0);
  GptConfig m = fp8_gpt2(true);
  m.fp8.first_last_layers_bf16 = true;
  ops = micro_batch_ops(m, l);
  EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kFp8AttentionFwd), 10 * att);
  EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kAttentionFwd), 2 * att);
  EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kAttentionBwd), 2 * 2.5 * att);
  l.recompute = Recompute::Selective;
  ops = micro_batch_ops(m, l);
  EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kFp8AttentionFwd), 2 * 10 * att);
  EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kAttentionFwd), 2 * 2 * att);
  EXPECT_EQ(parse_op_key(ops.front().op.key())->kind, ops.front().op.kind);
  for (const auto& c : ops) EXPECT_EQ(parse_op_key(c.op.key())->kind, c.op.kind) << c.op.key();
}

// A profile that timed only the bf16 attention (the shipped one, a cache
// from before the flag) takes the FP8 forward at kFp8AttentionFwdSpeedup
// times its fit's rate and the backward at kFp8AttentionBwdSpeedup; once the
// FP8 attention is timed, its own fit.
TEST(PlanTime, Fp8AttentionWithoutItsFitTakesTheBf16FitAtItsGain) {
  OpProfile p;
  const double fwd_rate = 6e14, bwd_rate = 4e14, over = 5e-6;
  for (int64_t T : {1024, 4096}) {
    OpShape o;
    o.d[0] = 1, o.d[1] = T, o.d[2] = 32, o.d[3] = 128;
    o.kind = OpKind::kAttentionFwd;
    p.measured[o.key()] = o.work() / fwd_rate + over;
    o.kind = OpKind::kAttentionBwd;
    p.measured[o.key()] = o.work() / bwd_rate + over;
  }
  p.refit();
  OpShape f;
  f.d[0] = 1, f.d[1] = 8192, f.d[2] = 32, f.d[3] = 128;
  f.kind = OpKind::kFp8AttentionFwd;
  bool ok = true;
  EXPECT_NEAR(p.seconds(f, &ok), f.work() / (fwd_rate * kFp8AttentionFwdSpeedup) + over, 1e-12);
  f.kind = OpKind::kFp8AttentionBwd;
  EXPECT_NEAR(p.seconds(f, &ok), f.work() / (bwd_rate * kFp8AttentionBwdSpeedup) + over, 1e-12);
  EXPECT_TRUE(ok);
  for (int64_t T : {2048, 8192}) {
    OpShape o = f;
    o.d[1] = T;
    p.measured[o.key()] = o.work() / 5e14;
  }
  p.refit();
  EXPECT_NEAR(p.seconds(f) / (f.work() / 5e14), 1.0, 1e-9);
  // The shipped table has no FP8 attention: with the flag the 8B layer
  // shape's step runs 8 cores on the bf16 fit at the forward's gain instead
  // of the bf16 cores' times (the backward's gain is 1).
  const auto h200 = shipped_profile("NVIDIA H200");
  ASSERT_TRUE(h200.has_value());
  GptConfig m = llama8b_layers();
  m.fp8.format = config::Fp8Format::Hybrid;
  Layout l = layout(1);
  l.micro_batch = 1, l.global_batch = 1;
  const double plain = h200->seconds_of(micro_batch_ops(m, l));
  m.fp8.dot_product_attention = true;
  OpShape core;
  core.kind = OpKind::kAttentionFwd;
  core.d[0] = 1, core.d[1] = 8192, core.d[2] = 32, core.d[3] = 128;
  const ClassFit& fit = h200->fits.at(OpClass::kAttentionFwd);
  const double fp8_core = core.work() / (fit.rate * kFp8AttentionFwdSpeedup) + fit.overhead_s;
  EXPECT_LT(fp8_core, h200->seconds(core));
  EXPECT_NEAR(plain - h200->seconds_of(micro_batch_ops(m, l)), 8 * (h200->seconds(core) - fp8_core), 1e-9 * plain);
}

// The FLOP-based compute term (no op times): the FP8 layers' attention
// FLOPs, 2 s h per token forward and 4 backward, at the gains; with
// selective recompute the forward twice.
TEST(PlanTime, Fp8AttentionInTheFlopModel) {
  Machine mc;
  mc.gpus_per_node = 1;
  for (Recompute r : {Recompute::None, Recompute::Selective}) {
    Layout l = layout(1);
    l.micro_batch = 4, l.global_batch = 4, l.recompute = r;
    const TimeBreakdown a = estimate_time(fp8_gpt2(false), l, mc), b = estimate_time(fp8_gpt2(true), l, mc);
    const GptConfig m = fp8_gpt2(false);
    double flops = m.flops_per_token() - fp8_linear_flops_per_token(m) * (1 - 1 / mc.fp8_gemm_speedup);
    if (r == Recompute::Selective) flops += 2.0 * 12 * 1024 * 768;
    const double fwd_runs = r == Recompute::None ? 1 : 2;
    const double saved = 12 * 1024.0 * 768 * (2 * fwd_runs * (1 - 1 / kFp8AttentionFwdSpeedup) +
                                              4 * (1 - 1 / kFp8AttentionBwdSpeedup));
    EXPECT_NEAR(b.compute / a.compute, (flops - saved) / flops, 1e-12) << int(r);
  }
}

// --calibrate on the CPU backend: a model with the flag asks for the FP8
// attention kinds, and they are timed with attention_fp8_forward /
// _backward (whose argument checks refuse wrong codes or scales) and
// fitted as their own classes.
TEST(PlanCalibrate, Fp8AttentionIsTimedWithTheRealOp) {
  GptConfig m = gpt_model(2, 128, 4, 64, 256);
  m.fp8.format = config::Fp8Format::Hybrid;
  m.fp8.dot_product_attention = true;
  Machine mc;
  mc.gpus_per_node = 1;
  SearchOptions o;
  o.global_batch = 2, o.micro_batch = 2;
  const std::vector<OpShape> wanted = ops_of_fitting_layouts(m, mc, o, nullptr);
  std::set<OpKind> kinds;
  for (const auto& op : wanted) kinds.insert(op.kind);
  EXPECT_TRUE(kinds.count(OpKind::kFp8AttentionFwd) && kinds.count(OpKind::kFp8AttentionBwd));
  EXPECT_FALSE(kinds.count(OpKind::kAttentionFwd) || kinds.count(OpKind::kAttentionBwd));
  auto be = backend::make_cpu_backend();
  OpProfile p;
  p.device = device_model_name(*be);
  EXPECT_EQ(calibrate_ops(*be, wanted, p), int(wanted.size()));
  for (const auto& op : wanted)
    if (op.op_class() == OpClass::kFp8AttentionFwd || op.op_class() == OpClass::kFp8AttentionBwd)
      EXPECT_GT(p.measured.at(op.key()), 0.0) << op.key();
  EXPECT_EQ(p.fits.count(OpClass::kFp8AttentionFwd), 1u);
  EXPECT_EQ(p.fits.count(OpClass::kFp8AttentionBwd), 1u);
  EXPECT_NE(p.to_json().find("\"fp8_attention_fwd\""), std::string::npos);
}

}  // namespace
}  // namespace tripod::plan
