// The FP8 terms of tripod plan's memory and time model (--fp8-format,
// --fp8-param-gather) against hand-computed values for GPT-2 124M (every
// number is worked out in the comment next to it from docs/plan.md and
// docs/fp8.md, not from the code under test).
#include <gtest/gtest.h>

#include "plan/memory_model.h"
#include "plan/op_profile.h"
#include "plan/search.h"
#include "plan/time_model.h"
#include "unit/plan/plan_models.h"

namespace tripod::plan {
namespace {

// FP8 (--fp8-format): Fp8Bytes by hand for GPT-2 124M at micro-batch 4
// (N = 4096, C 768, Q 2304, F = F1 3072), tp 1.
TEST(PlanMemory, Fp8BytesHandCount) {
  GptConfig m = gpt2_124m();
  m.fp8.format = config::Fp8Format::Hybrid;
  // weights: 2 x 768 x (2304 + 768 + 3072 + 3072) = 14,155,776 per layer;
  // kept transposes 4096 x (768 + 768 + 768 + 3072) + 64 = 22,020,160;
  // scratch 4096 x 3072 (x) + 2 x 4096 x 3072 (dy and its transpose) = 37,748,736.
  Fp8Bytes f = tripod_fp8_bytes(m, 4, 1, Recompute::None, 0, 12);
  EXPECT_DOUBLE_EQ(f.weights, 12 * 14155776.0);
  EXPECT_DOUBLE_EQ(f.per_microbatch, 12 * 22020160.0);
  EXPECT_DOUBLE_EQ(f.scratch, 37748736.0);
  // Full recompute keeps no transposes and casts x again: x's transpose scratch too.
  f = tripod_fp8_bytes(m, 4, 1, Recompute::Full, 0, 12);
  EXPECT_DOUBLE_EQ(f.per_microbatch, 0.0);
  EXPECT_DOUBLE_EQ(f.scratch, 37748736.0 + 4096 * 3072.0);
  // --first-last-layers-bf16: layers 1..10 only; a chunk of layers 0 and 11 has none.
  m.fp8.first_last_layers_bf16 = true;
  EXPECT_DOUBLE_EQ(tripod_fp8_bytes(m, 4, 1, Recompute::None, 0, 12).weights, 10 * 14155776.0);
  EXPECT_DOUBLE_EQ(tripod_fp8_bytes(m, 4, 1, Recompute::None, 0, 1).weights, 0.0);
  // tp 2: weights and the row-parallel inputs halve: 2 x 768 x 9216 / 2; 4096 x (768 + 384 + 768 + 1536) + 64.
  m.fp8.first_last_layers_bf16 = false;
  f = tripod_fp8_bytes(m, 4, 2, Recompute::None, 0, 1);
  EXPECT_DOUBLE_EQ(f.weights, 7077888.0);
  EXPECT_DOUBLE_EQ(f.per_microbatch, 4096 * 3456.0 + 64);
  // scratch: x 4096 x max(768, 1536); dy 2 x 4096 x max(1152, 768, 1536).
  EXPECT_DOUBLE_EQ(f.scratch, 4096 * 1536.0 + 2 * 4096 * 1536.0);
  // No FP8 anywhere without --fp8-format.
  EXPECT_DOUBLE_EQ(tripod_fp8_bytes(gpt2_124m(), 4, 1, Recompute::None, 0, 12).weights, 0.0);
  EXPECT_DOUBLE_EQ(f.param_gather, 0.0);  // nor a gather without --fp8-param-gather
}

// --fp8-recipe blockwise by hand for GPT-2 124M at micro-batch 4 (N = 4096
// rows, 32 blocks of 128): the kept transposes carry one f32 scale per 128
// rows of each of their 768 + 768 + 768 + 3072 = 5376 columns (4 x 32 x
// 5376 = 688,128 bytes per layer) instead of 16 f32 slots; the scratch an
// f32 scale per 128 codes.
TEST(PlanMemory, Fp8BlockwiseKeepsBlockScales) {
  GptConfig m = gpt2_124m();
  m.fp8.format = config::Fp8Format::Hybrid;
  m.fp8.recipe = config::Fp8Recipe::Blockwise;
  const Fp8Bytes f = tripod_fp8_bytes(m, 4, 1, Recompute::None, 0, 12);
  EXPECT_DOUBLE_EQ(f.per_microbatch, 12 * (4096 * 5376.0 + 688128.0));
  EXPECT_DOUBLE_EQ(f.scratch, 37748736.0 * (1 + 4.0 / 128));
  EXPECT_DOUBLE_EQ(f.weights, 12 * 14155776.0);
  EXPECT_DOUBLE_EQ(f.swiglu_act_saved, 0.0);  // GPT-2 has no SwiGLU
}

// --fp8-param-gather by hand for GPT-2 124M. W = 768 x 9216 = 7,077,888
// FP8 weight elements per layer, 84,934,656 for the 12; at dp 2 the FP8
// gather's receive buffer holds W and the send buffer W / 2: 127,401,984,
// more than the dgrad transpose's copies of the largest weight (fc1 / fc2,
// 768 x 3072 = 2,359,296, in f32 and FP8: 11,796,480). The weights' FP8
// copies (the codes) and the rest are as without the flag.
TEST(PlanMemory, Fp8ParamGatherHandCount) {
  GptConfig m = gpt2_124m();
  m.fp8.format = config::Fp8Format::Hybrid;
  const Fp8Bytes plain = tripod_fp8_bytes(m, 4, 1, Recompute::None, 0, 12, 2);
  m.fp8.param_gather = true;
  Fp8Bytes f = tripod_fp8_bytes(m, 4, 1, Recompute::None, 0, 12, 2);
  EXPECT_DOUBLE_EQ(f.gathered, 84934656.0);
  EXPECT_DOUBLE_EQ(f.param_gather, 127401984.0);
  EXPECT_DOUBLE_EQ(f.weights, plain.weights);
  EXPECT_DOUBLE_EQ(f.per_microbatch, plain.per_microbatch);
  EXPECT_DOUBLE_EQ(f.scratch, plain.scratch);
  // tp 2, dp 4, one layer: W = 3,538,944, x 1.25 = 4,423,680 < the
  // transpose's 5 x 1,179,648 = 5,898,240.
  f = tripod_fp8_bytes(m, 4, 2, Recompute::None, 0, 1, 4);
  EXPECT_DOUBLE_EQ(f.param_gather, 5898240.0);
  // Not with the distributed optimizer (shard_ranks 0), or no FP8 layer in the chunk: nothing.
  EXPECT_DOUBLE_EQ(tripod_fp8_bytes(m, 4, 1, Recompute::None, 0, 12, 0).param_gather, 0.0);
  m.fp8.first_last_layers_bf16 = true;
  EXPECT_DOUBLE_EQ(tripod_fp8_bytes(m, 4, 1, Recompute::None, 0, 1, 2).param_gather, 0.0);
}

// In the estimate (one stage, the distributed optimizer): the flag adds
// the largest of those buffers to the workspace. GPT-2 124M has P =
// 124,475,904 parameters (with the padded vocabulary 50,304), W =
// 84,934,656 of them FP8 weights, P - W = 39,541,248 others. At dp 2 they
// are over half the piece (31,118,976): no packed f32 gather, so the FP8
// gather's 127,401,984. With 6 more layers (P = 167,003,136, W =
// 127,401,984, P - W = 39,601,152 < half of 83,501,568) the packed f32
// gather's 4 x 3 x 39,601,152 = 475,213,824 bytes are the largest.
TEST(PlanMemory, Fp8ParamGatherInTheEstimate) {
  GptConfig plain = gpt2_124m(), pg = gpt2_124m();
  plain.fp8.format = pg.fp8.format = config::Fp8Format::Hybrid;
  pg.fp8.param_gather = true;
  Layout l = layout(2);
  l.micro_batch = 4, l.global_batch = 8;
  l.distributed_optimizer = true;
  const MemoryBreakdown a = estimate_memory(plain, l), b = estimate_memory(pg, l);
  EXPECT_EQ(a.params_per_gpu, 124475904);
  EXPECT_DOUBLE_EQ(b.workspace - a.workspace, 127401984.0);
  EXPECT_DOUBLE_EQ(b.activations, a.activations);
  EXPECT_DOUBLE_EQ(b.model_states, a.model_states);
  plain.num_layers = pg.num_layers = 18;
  const MemoryBreakdown a18 = estimate_memory(plain, l), b18 = estimate_memory(pg, l);
  EXPECT_EQ(a18.params_per_gpu, 167003136);
  EXPECT_DOUBLE_EQ(b18.workspace - a18.workspace, 475213824.0);
  // Without the distributed optimizer the flag does not apply: nothing.
  l.distributed_optimizer = false;
  EXPECT_DOUBLE_EQ(estimate_memory(pg, l).workspace, estimate_memory(plain, l).workspace);
}

TEST(PlanMemory, Fp8InTheEstimate) {
  // One GPU, micro-batch 4: one micro-batch in flight, so the estimate grows
  // by the hand count above (activations: the transposes; workspace: weights + scratch).
  GptConfig bf16 = gpt2_124m(), fp8 = gpt2_124m();
  fp8.fp8.format = config::Fp8Format::Hybrid;
  Layout l = layout(1);
  l.micro_batch = 4, l.global_batch = 4;
  const MemoryBreakdown a = estimate_memory(bf16, l), b = estimate_memory(fp8, l);
  EXPECT_DOUBLE_EQ(b.activations - a.activations, 12 * 22020160.0);
  EXPECT_DOUBLE_EQ(b.workspace - a.workspace, 12 * 14155776.0 + 37748736.0);
  EXPECT_DOUBLE_EQ(b.model_states, a.model_states);
}

// NOTE [FP8 SwiGLU cast]: a Llama-style model (SwiGLU, no biases) under
// delayed or blockwise scaling keeps no bf16 SwiGLU output. By hand at the Llama 3 8B
// layer shape (C 4096, F 14336, seq 8192, micro-batch 1, 8 layers, bf16):
// 2 x 8192 x 14336 = 234,881,024 bytes per layer, 1,879,048,192 for the 8;
// at tp 2, half. Tensorwise scaling (the cast reads the stored
// activation), a GELU model and full recomputation save nothing.
TEST(PlanMemory, Fp8SwigluCastKeepsNoActivation) {
  GptConfig m = llama8b_layers();
  m.fp8.format = config::Fp8Format::Hybrid;
  EXPECT_DOUBLE_EQ(tripod_fp8_bytes(m, 1, 1, Recompute::None, 0, 8).swiglu_act_saved, 1879048192.0);
  EXPECT_DOUBLE_EQ(tripod_fp8_bytes(m, 1, 2, Recompute::Selective, 0, 8).swiglu_act_saved, 939524096.0);
  EXPECT_DOUBLE_EQ(tripod_fp8_bytes(m, 1, 1, Recompute::Full, 0, 8).swiglu_act_saved, 0.0);
  Layout l = layout(1);
  l.micro_batch = 1, l.global_batch = 1;
  const MemoryBreakdown delayed = estimate_memory(m, l);
  m.fp8.recipe = config::Fp8Recipe::Blockwise;  // fuses the cast too (its block scales come from the values)
  EXPECT_DOUBLE_EQ(tripod_fp8_bytes(m, 1, 1, Recompute::None, 0, 8).swiglu_act_saved, 1879048192.0);
  m.fp8.recipe = config::Fp8Recipe::Tensorwise;
  EXPECT_DOUBLE_EQ(tripod_fp8_bytes(m, 1, 1, Recompute::None, 0, 8).swiglu_act_saved, 0.0);
  EXPECT_DOUBLE_EQ(estimate_memory(m, l).activations - delayed.activations, 1879048192.0);
  GptConfig gelu = gpt2_124m();
  gelu.fp8.format = config::Fp8Format::Hybrid;
  EXPECT_DOUBLE_EQ(tripod_fp8_bytes(gelu, 4, 1, Recompute::None, 0, 12).swiglu_act_saved, 0.0);
}

// --no-fp8-wgrad (Fp8Config::high_precision_wgrad): the weight gradients
// run in bf16 on the unquantized x and dy, so an FP8 layer keeps no input
// transposes nor their scales, and its activations are a bf16 layer's. By
// hand for GPT-2 124M at micro-batch 4 (as Fp8BytesHandCount): per
// micro-batch 0 instead of 12 x 22,020,160; the weights' FP8 copies as
// before, 12 x 14,155,776; the scratch x 4096 x 3072 + dy 4096 x 3072 =
// 25,165,824 (no dy transpose: only the FP8 wgrad reads it), and under full
// recompute no x transpose for a second cast either: 25,165,824 (not +
// 12,582,912). Blockwise: no block scales kept either.
TEST(PlanMemory, Fp8HighPrecisionWgradKeepsNoTransposes) {
  GptConfig m = gpt2_124m();
  m.fp8.format = config::Fp8Format::Hybrid;
  m.fp8.high_precision_wgrad = true;
  ASSERT_FALSE(m.fp8.fp8_wgrad());
  Fp8Bytes f = tripod_fp8_bytes(m, 4, 1, Recompute::None, 0, 12);
  EXPECT_DOUBLE_EQ(f.per_microbatch, 0.0);
  EXPECT_DOUBLE_EQ(f.weights, 12 * 14155776.0);
  EXPECT_DOUBLE_EQ(f.scratch, 25165824.0);
  EXPECT_DOUBLE_EQ(f.swiglu_act_saved, 0.0);
  f = tripod_fp8_bytes(m, 4, 1, Recompute::Selective, 0, 12);
  EXPECT_DOUBLE_EQ(f.per_microbatch, 0.0);
  f = tripod_fp8_bytes(m, 4, 1, Recompute::Full, 0, 12);
  EXPECT_DOUBLE_EQ(f.per_microbatch, 0.0);
  EXPECT_DOUBLE_EQ(f.scratch, 25165824.0);
  // tp 2, one layer: weights 7,077,888; scratch 4096 x 1536 + 4096 x 1536.
  f = tripod_fp8_bytes(m, 4, 2, Recompute::None, 0, 1);
  EXPECT_DOUBLE_EQ(f.per_microbatch, 0.0);
  EXPECT_DOUBLE_EQ(f.weights, 7077888.0);
  EXPECT_DOUBLE_EQ(f.scratch, 2 * 4096 * 1536.0);
  m.fp8.recipe = config::Fp8Recipe::Blockwise;
  f = tripod_fp8_bytes(m, 4, 1, Recompute::None, 0, 12);
  EXPECT_DOUBLE_EQ(f.per_microbatch, 0.0);  // not 12 x (4096 x 5376 + 688,128)
  EXPECT_DOUBLE_EQ(f.scratch, 25165824.0 * (1 + 4.0 / 128));

  // In the estimate (one GPU, micro-batch 4, one micro-batch in flight):
  // the activations are bf16's to the byte, the workspace adds the FP8
  // weights and scratch, 12 x 14,155,776 + 25,165,824.
  GptConfig bf16 = gpt2_124m();
  m.fp8.recipe = config::Fp8Recipe::Delayed;
  Layout l = layout(1);
  l.micro_batch = 4, l.global_batch = 4;
  const MemoryBreakdown a = estimate_memory(bf16, l), b = estimate_memory(m, l);
  EXPECT_DOUBLE_EQ(b.activations, a.activations);
  EXPECT_DOUBLE_EQ(b.workspace - a.workspace, 12 * 14155776.0 + 25165824.0);
  EXPECT_DOUBLE_EQ(b.model_states, a.model_states);
}

// --no-fp8-wgrad at the Llama 3 8B layer shape (as
// Fp8SwigluCastKeepsNoActivation: C 4096, F 14336, seq 8192, micro-batch 1,
// 8 layers, bf16): the SwiGLU cast is not fused (fc2's bf16 wgrad reads the
// activation), so nothing is saved, and no transposes are kept. Against
// FP8 wgrad the activations grow by the SwiGLU activation, 1,879,048,192,
// less the kept transposes, 8 x (8192 x (4096 + 4096 + 4096 + 14336) + 64)
// = 1,744,830,976: 134,217,216 bytes; under blockwise scaling less the
// transposes with their block scales, 8 x (218,103,808 + 4 x 64 x 26,624)
// = 1,799,356,416: 79,691,776 bytes. Either way they equal bf16's.
TEST(PlanMemory, Fp8HighPrecisionWgradKeepsTheSwigluActivation) {
  const GptConfig bf16 = llama8b_layers();
  Layout l = layout(1);
  l.micro_batch = 1, l.global_batch = 1;
  const double plain = estimate_memory(bf16, l).activations;
  for (auto [recipe, grows] : {std::pair{config::Fp8Recipe::Delayed, 134217216.0},
                               std::pair{config::Fp8Recipe::Blockwise, 79691776.0}}) {
    GptConfig m = bf16;
    m.fp8.format = config::Fp8Format::Hybrid;
    m.fp8.recipe = recipe;
    const double fp8_wgrad = estimate_memory(m, l).activations;
    m.fp8.high_precision_wgrad = true;
    for (Recompute r : {Recompute::None, Recompute::Selective}) {
      const Fp8Bytes f = tripod_fp8_bytes(m, 1, 1, r, 0, 8);
      EXPECT_DOUBLE_EQ(f.swiglu_act_saved, 0.0) << int(r);
      EXPECT_DOUBLE_EQ(f.per_microbatch, 0.0) << int(r);
    }
    EXPECT_DOUBLE_EQ(estimate_memory(m, l).activations - fp8_wgrad, grows);
    EXPECT_DOUBLE_EQ(estimate_memory(m, l).activations, plain);
  }
}

TEST(PlanTime, Fp8GemmsAtTheirRate) {
  // 6 x 768 x 9216 = 42,467,328 FLOPs per token per FP8 layer, x 12 = 509,607,936.
  GptConfig m = gpt2_124m();
  m.fp8.format = config::Fp8Format::Hybrid;
  EXPECT_DOUBLE_EQ(fp8_linear_flops_per_token(m), 509607936.0);
  EXPECT_DOUBLE_EQ(fp8_linear_flops_per_token(gpt2_124m()), 0.0);
  // The compute term loses those FLOPs x (1 - 1/1.6) at the bf16 rate.
  Machine mc;
  mc.gpus_per_node = 1;
  Layout l = layout(1);
  l.micro_batch = 4, l.global_batch = 4;
  const double rate = mc.peak_tflops * 1e12 * mc.assumed_mfu * matmul_efficiency(m, l);
  const double saved = 509607936.0 * (1 - 1 / 1.6) * 1024 * 4 / rate;
  EXPECT_NEAR(estimate_time(gpt2_124m(), l, mc).compute - estimate_time(m, l, mc).compute, saved, 1e-12);
}

// --no-fp8-wgrad: the weight-gradient GEMMs, 2 of the 6 FLOPs per weight
// per token, run at the bf16 rate: 4 x 768 x 9216 x 12 = 339,738,624 FP8
// FLOPs per token for GPT-2 124M, and the compute term saves 169,869,312 x
// (1 - 1/1.6) per token less than with FP8 wgrad (1 - 1/1.4 blockwise).
// Full recompute runs the forward again, in FP8: the FP8 FLOPs grow by 2 of
// their 4 (not 4/3 of them), so the difference stays 169,869,312 x (1 - 1/1.6).
TEST(PlanTime, Fp8HighPrecisionWgradRunsTheWgradAtTheBf16Rate) {
  GptConfig fp8 = gpt2_124m(), hp = gpt2_124m();
  fp8.fp8.format = hp.fp8.format = config::Fp8Format::Hybrid;
  hp.fp8.high_precision_wgrad = true;
  EXPECT_DOUBLE_EQ(fp8_linear_flops_per_token(hp), 339738624.0);
  EXPECT_DOUBLE_EQ(fp8_linear_flops_per_token(fp8), 509607936.0);
  Machine mc;
  mc.gpus_per_node = 1;
  Layout l = layout(1);
  l.micro_batch = 4, l.global_batch = 4;
  const double rate = mc.peak_tflops * 1e12 * mc.assumed_mfu * matmul_efficiency(hp, l), tokens = 1024 * 4;
  const double bf16 = estimate_time(gpt2_124m(), l, mc).compute;
  for (Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full}) {
    SCOPED_TRACE(int(r));
    l.recompute = r;
    EXPECT_NEAR(estimate_time(hp, l, mc).compute - estimate_time(fp8, l, mc).compute,
                169869312.0 * (1 - 1 / 1.6) * tokens / rate, 1e-12);
  }
  l.recompute = Recompute::None;
  EXPECT_NEAR(bf16 - estimate_time(hp, l, mc).compute, 339738624.0 * (1 - 1 / 1.6) * tokens / rate, 1e-12);
  fp8.fp8.recipe = hp.fp8.recipe = config::Fp8Recipe::Blockwise;
  EXPECT_NEAR(estimate_time(hp, l, mc).compute - estimate_time(fp8, l, mc).compute,
              169869312.0 * (1 - 1 / 1.4) * tokens / rate, 1e-12);
}

// --fp8-recipe blockwise: the same FP8 FLOPs at 1.4x the bf16 rate
// (block-scaled GEMMs and casts, kFp8BlockGemmSpeedup) instead of 1.6x, so
// the FLOP-based compute term gains 509,607,936 x (1 - 1/1.4) per token
// over bf16, and the blockwise run is slower than the delayed one by
// 509,607,936 x (1/1.4 - 1/1.6) per token at the bf16 rate.
TEST(PlanTime, Fp8BlockwiseGemmsAtTheirRate) {
  GptConfig delayed = gpt2_124m(), block = gpt2_124m();
  delayed.fp8.format = block.fp8.format = config::Fp8Format::Hybrid;
  block.fp8.recipe = config::Fp8Recipe::Blockwise;
  EXPECT_DOUBLE_EQ(fp8_linear_flops_per_token(block), 509607936.0);
  Machine mc;
  mc.gpus_per_node = 1;
  EXPECT_DOUBLE_EQ(mc.fp8_block_gemm_speedup, 1.4);
  EXPECT_DOUBLE_EQ(mc.fp8_gemm_speedup, 1.6);
  Layout l = layout(1);
  l.micro_batch = 4, l.global_batch = 4;
  const double rate = mc.peak_tflops * 1e12 * mc.assumed_mfu * matmul_efficiency(block, l);
  const double tokens = 1024 * 4;
  const double bf16 = estimate_time(gpt2_124m(), l, mc).compute, d = estimate_time(delayed, l, mc).compute,
               b = estimate_time(block, l, mc).compute;
  EXPECT_NEAR(bf16 - b, 509607936.0 * (1 - 1 / 1.4) * tokens / rate, 1e-12);
  EXPECT_NEAR(b - d, 509607936.0 * (1 / 1.4 - 1 / 1.6) * tokens / rate, 1e-12);
  EXPECT_GT(b, d);
  // The machine's field is the one taken (a recipe-blind model would not move).
  mc.fp8_block_gemm_speedup = 1.6;
  EXPECT_NEAR(estimate_time(block, l, mc).compute, d, 1e-12);
}

// The plan of a blockwise run is slower than the delayed one's, layout for
// layout, under the default (assumed-MFU) model and under the shipped H200
// op times (whose bf16 linear fit gives the FP8 linears at 1.6x, the
// block-scaled ones at 1.4x); the search ranks them the same way.
TEST(PlanTime, BlockwisePlanIsSlowerThanDelayed) {
  GptConfig delayed = gpt2_124m(), block = gpt2_124m();
  delayed.fp8.format = block.fp8.format = config::Fp8Format::Hybrid;
  block.fp8.recipe = config::Fp8Recipe::Blockwise;
  Machine mc;  // 1 x 8 x 80 GiB
  Layout l = layout(8, 2);
  l.micro_batch = 4, l.global_batch = 64;
  EXPECT_GT(estimate_time(block, l, mc).total(), estimate_time(delayed, l, mc).total());
  SearchOptions o;
  o.global_batch = 256;
  const PlanResult pd = plan_layouts(delayed, mc, o), pb = plan_layouts(block, mc, o);
  ASSERT_FALSE(pd.fits.empty());
  ASSERT_FALSE(pb.fits.empty());
  EXPECT_GT(pb.fits[0].time.total(), pd.fits[0].time.total());
  EXPECT_LT(pb.fits[0].tokens_per_second, pd.fits[0].tokens_per_second);

  const auto shipped = shipped_profile("h200");
  ASSERT_TRUE(shipped.has_value());
  mc.ops = &*shipped;
  const TimeBreakdown td = estimate_time(delayed, l, mc), tb = estimate_time(block, l, mc);
  ASSERT_TRUE(td.compute_from_op_times && tb.compute_from_op_times);
  EXPECT_GT(tb.compute, td.compute);
  EXPECT_GT(tb.optimizer, td.optimizer);  // the tile casts write their scales too
}

}  // namespace
}  // namespace tripod::plan
