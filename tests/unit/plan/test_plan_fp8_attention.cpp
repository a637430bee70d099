// tripod plan's count of --fp8-dot-product-attention (plan::Fp8Bytes)
// against hand-computed values for GPT-2 124M (N = 4096 at micro-batch 4,
// C 768, Q 2304): per FP8 layer and micro-batch in flight the FP8
// attention's kept qkv8 and att8, N (Q + C) / t bytes; in the scratch the
// backward's dout and dqkv codes, N (C + Q) / t, and under recompute the
// workspace's qkv8 and att8 as well. And the search refuses its layouts
// with context parallelism.
#include <gtest/gtest.h>

#include "plan/memory_model.h"
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

}  // namespace
}  // namespace tripod::plan
