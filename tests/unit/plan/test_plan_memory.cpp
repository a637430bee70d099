// Memory and time model of tripod plan against hand-computed values for
// GPT-2 124M and 1.5B (every number below is worked out in the comment next
// to it from the formulas of docs/plan.md, not from the code under test).
#include <gtest/gtest.h>

#include "plan/memory_model.h"
#include "plan/time_model.h"
#include "unit/plan/plan_models.h"

namespace tripod::plan {
namespace {

GptConfig gpt2_1558m() { return gpt_model(48, 1600, 25); }

TEST(PlanMemory, ParameterCountsGpt2) {
  // 124M: per layer 4C + 3C^2 + 3C + C^2 + C + 2FC + F + C = 7,087,872 (C 768, F 3072);
  // x 12 + 50304 x 768 + 1024 x 768 + 2 x 768 = 124,475,904 (llm.c prints the same).
  EXPECT_EQ(gpt2_124m().padded_vocab_size(1), 50304);
  EXPECT_EQ(gpt2_124m().num_parameters(50304), 124475904);
  EXPECT_EQ(params_on_stage(gpt2_124m(), 1, 1, 0), 124475904);
  // 1.5B at tp 2: vocab padded to a multiple of 256 -> 50432.
  EXPECT_EQ(gpt2_1558m().padded_vocab_size(2), 50432);
  // tp2 pp2, stage 0: 24 layers x (30,731,200 / 2 sharded + 6 x 1600 replicated) = 369,004,800,
  // + 50432 x 1600 / 2 + 1024 x 1600 = 410,988,800.
  EXPECT_EQ(params_on_stage(gpt2_1558m(), 2, 2, 0), 410988800);
  // last stage: layers + final LN 3200 + its copy of the word embedding 40,345,600.
  EXPECT_EQ(params_on_stage(gpt2_1558m(), 2, 2, 1), 409353600);
}

TEST(PlanMemory, BytesPerParamAsMegatronDoc) {
  EXPECT_DOUBLE_EQ(model_state_bytes_per_param(DType::BF16, false, 8), 18.0);
  EXPECT_DOUBLE_EQ(model_state_bytes_per_param(DType::BF16, true, 8), 6.0 + 12.0 / 8);
  EXPECT_DOUBLE_EQ(model_state_bytes_per_param(DType::F16, true, 4), 9.0);
  EXPECT_DOUBLE_EQ(model_state_bytes_per_param(DType::F32, false, 4), 16.0);
  EXPECT_DOUBLE_EQ(model_state_bytes_per_param(DType::F32, true, 4), 10.0);
}

TEST(PlanMemory, ZeroStagesByHand) {
  // docs/zero.md. Per parameter, bf16, dp 8: ZeRO-2 keeps the bf16 param
  // (2) and shards grad + master + m + v: Megatron 2 + 16/8 = 4; tripod
  // keeps the whole f32 values next to the bf16 copy (6) and shards its
  // grad, value, m, v: 6 + 16/8 = 8; ZeRO-3 shards all: Megatron
  // (2 + 4 + 12)/8 = 2.25, tripod (4 + 4 + 8)/8 = 2. fp32, dp 4: ZeRO-2
  // 4 + 12/4 = 7 (Megatron: the master is the param), tripod 4 + 16/4 = 8.
  EXPECT_DOUBLE_EQ(model_state_bytes_per_param(DType::BF16, true, 8, false, 2), 4.0);
  EXPECT_DOUBLE_EQ(model_state_bytes_per_param(DType::BF16, true, 8, true, 2), 8.0);
  // ZeRO-1, tripod: the f32 values, the bf16 copy and the f32 grads whole (10) + 16/8.
  EXPECT_DOUBLE_EQ(model_state_bytes_per_param(DType::BF16, true, 8, true, 0), 12.0);
  EXPECT_DOUBLE_EQ(model_state_bytes_per_param(DType::BF16, true, 8, false, 3), 2.25);
  EXPECT_DOUBLE_EQ(model_state_bytes_per_param(DType::BF16, true, 8, true, 3), 2.0);
  EXPECT_DOUBLE_EQ(model_state_bytes_per_param(DType::F32, true, 4, false, 2), 7.0);
  EXPECT_DOUBLE_EQ(model_state_bytes_per_param(DType::F32, true, 4, true, 2), 8.0);

  // GPT-2 124M on 8 GPUs, plain dp 8, bf16, tripod model. In use at once:
  // the embedding group E = 50304 x 768 + 1024 x 768 (word and position
  // embeddings) = 39,419,904 and two layers of G = 7,087,872: the f32
  // gradients of E + 2G = 53,595,648 elements. ZeRO-2: x 4 = 214,382,592
  // bytes. ZeRO-3 also holds gathered bf16 params (NOTE [Compute-dtype
  // all-gather]), the larger of
  //   a layer's backward:     214,382,592 + G x 2 = 228,558,336
  //   the embedding's:        (E + G) x 4 + E x 2 = 186,031,104 + 78,839,808 = 264,870,912
  // and with the prefetch (two layers gathered) 214,382,592 + 2G x 2 = 242,734,080.
  const GptConfig m = gpt2_124m();
  Layout l = layout(8);
  l.dtype = DType::BF16;
  l.global_batch = 8;
  l.distributed_optimizer = true;
  EXPECT_DOUBLE_EQ(sharded_working_bytes(m, l, 0), 0.0);
  l.zero_stage = 2;
  EXPECT_DOUBLE_EQ(sharded_working_bytes(m, l, 0), 214382592.0);
  // model states: 124,475,904 x 8 + 214,382,592 = 1,210,189,824.
  EXPECT_DOUBLE_EQ(estimate_memory(m, l).model_states, 1210189824.0);
  l.zero_stage = 3;
  EXPECT_DOUBLE_EQ(sharded_working_bytes(m, l, 0), 264870912.0);
  // The step: P = 124,475,904 x 16/8 + 264,870,912 = 513,822,720, the
  // model state. Nothing else holds more: the sharded init and a load hold
  // one parameter at a time on the host, a save a piece of at most the
  // largest parameter, the word embeddings' 38,633,472 x 4 = 154,533,888
  // bytes (4 Mi x 4 = 16,777,216 with the save's window), next to the
  // shards alone, below the step's working set (NOTE [Streamed shard save]).
  // (ZeRO-1: x 12 = 1,493,710,848.)
  EXPECT_DOUBLE_EQ(double(params_on_stage(m, 1, 1, 0)) * 2 + 264870912.0, 513822720.0);
  EXPECT_DOUBLE_EQ(estimate_memory(m, l).model_states, 513822720.0);
  l.overlap_param_gather = true;  // the embedding's moment is still the larger
  EXPECT_DOUBLE_EQ(sharded_working_bytes(m, l, 0), 264870912.0);
  l.overlap_param_gather = false;
  l.zero_stage = 0;
  EXPECT_DOUBLE_EQ(estimate_memory(m, l).model_states, 1493710848.0);
  // Hybrid sharding, 2 instances of 4 ranks: every sharded term / 4, not / 8;
  // the layers in use are the same.
  //   ZeRO-1: x (10 + 16/4) = 1,742,662,656
  //   ZeRO-2: x (6 + 16/4) + 214,382,592 = 1,244,759,040 + 214,382,592 = 1,459,141,632
  //   ZeRO-3: x 16/4 + 264,870,912 = 762,774,528
  l.dist_opt_instances = 2;
  EXPECT_EQ(l.shard_ranks(), 4);
  EXPECT_DOUBLE_EQ(estimate_memory(m, l).model_states, 1742662656.0);
  l.zero_stage = 2;
  EXPECT_DOUBLE_EQ(estimate_memory(m, l).model_states, 1459141632.0);
  l.zero_stage = 3;
  EXPECT_DOUBLE_EQ(estimate_memory(m, l).model_states, 762774528.0);
  // pp 2 x dp 4, fp32 ZeRO-3 (f32 grads, f32 params gathered): both ends
  // hold the (tied) embedding, the last stage without the position
  // embedding (E' = 38,633,472); the middle of a deeper pipeline holds none.
  //   stage 0: max((E + 2G) 4 + 4G = 242,734,080, (E + G) 4 + 4E = 343,710,720)
  //   stage 1: max((E' + 2G) 4 + 4G = 239,588,352, (E' + G) 4 + 4E' = 337,419,264)
  //   pp 4, stage 1: 2G x 4 + G x 4 = 85,054,464; with the prefetch 2G x 8 = 113,405,952
  Layout p = layout(8, 1, 2);
  p.dtype = DType::F32;
  p.global_batch = 8;
  p.distributed_optimizer = true;
  p.zero_stage = 3;
  EXPECT_DOUBLE_EQ(sharded_working_bytes(m, p, 0), 343710720.0);
  EXPECT_DOUBLE_EQ(sharded_working_bytes(m, p, 1), 337419264.0);
  Layout q = layout(8, 1, 4);
  q.dtype = DType::F32;
  q.global_batch = 8;
  q.distributed_optimizer = true;
  q.zero_stage = 3;
  EXPECT_DOUBLE_EQ(sharded_working_bytes(m, q, 1), 85054464.0);
  q.overlap_param_gather = true;
  EXPECT_DOUBLE_EQ(sharded_working_bytes(m, q, 1), 113405952.0);
}

TEST(PlanMemory, PaperFormulasAtFourH) {
  // With F = 4h the generalised formula is the paper's: s b h (34 + 5as/h) etc.
  const GptConfig m = gpt2_124m();
  const double sbh = 1024.0 * 4 * 768, a = 12, s = 1024, h = 768;
  EXPECT_DOUBLE_EQ(paper_layer_activation_bytes(m, 4, 1, false, Recompute::None), sbh * (34 + 5 * a * s / h));
  EXPECT_DOUBLE_EQ(paper_layer_activation_bytes(m, 4, 4, false, Recompute::None),
                   sbh * (10 + 24.0 / 4 + 5 * a * s / (h * 4)));
  EXPECT_DOUBLE_EQ(paper_layer_activation_bytes(m, 4, 4, true, Recompute::None), sbh * (34.0 / 4 + 5 * a * s / (h * 4)));
  EXPECT_DOUBLE_EQ(paper_layer_activation_bytes(m, 4, 4, true, Recompute::Selective), sbh * 34.0 / 4);
  EXPECT_DOUBLE_EQ(paper_layer_activation_bytes(m, 4, 4, true, Recompute::Full), 2 * sbh / 4);
  EXPECT_DOUBLE_EQ(paper_layer_activation_bytes(m, 4, 4, false, Recompute::Full), 2 * sbh);
}

TEST(PlanMemory, InflightMicrobatches) {
  EXPECT_DOUBLE_EQ(inflight_microbatches(1, 1, 32), 1.0);
  EXPECT_DOUBLE_EQ(inflight_microbatches(4, 1, 8), 4.0);  // 1F1B: P
  EXPECT_DOUBLE_EQ(inflight_microbatches(4, 1, 2), 2.0);  // fewer micro-batches than stages
  // Interleaved, P 4, v 2, many micro-batches: P (1 + (P-1)/(P v)) = 4 x 11/8 = 5.5.
  EXPECT_DOUBLE_EQ(inflight_microbatches(4, 2, 64), 5.5);
}

// The Megatron-style model (Korthikanti et al.), --memory-model megatron.
const MemoryOptions kMegatron{MemoryModelKind::kMegatron};

TEST(PlanMemory, Gpt2_124mPlainDp) {
  Layout l = layout(8);
  l.micro_batch = 4, l.global_batch = 32;
  const MemoryBreakdown mb = estimate_memory(gpt2_124m(), l, kMegatron);
  EXPECT_EQ(mb.stage, 0);
  EXPECT_DOUBLE_EQ(mb.model_states, 124475904.0 * 18);  // 2,240,566,272
  // 12 layers x sbh (34 + 80) with sbh = 1024 x 4 x 768 = 3,145,728, + embedding
  // dropout mask sbh, + loss head 2sbh + 2sbh + 4 s b Vp = 5,143,265,280.
  EXPECT_DOUBLE_EQ(mb.activations, 5143265280.0);
  EXPECT_DOUBLE_EQ(mb.workspace, 2.0 * (1 << 30) + 0.1 * 5143265280.0);
  l.distributed_optimizer = true;
  EXPECT_DOUBLE_EQ(estimate_memory(gpt2_124m(), l, kMegatron).model_states, 124475904.0 * 7.5);
}

TEST(PlanMemory, Gpt2_1558mTp2Pp2Sp) {
  Layout l = layout(8, 2, 2);
  l.micro_batch = 1, l.global_batch = 64, l.sequence_parallel = true;
  const MemoryBreakdown mb = estimate_memory(gpt2_1558m(), l, kMegatron);
  EXPECT_EQ(mb.stage, 0);  // first stage: 2 micro-batches in flight + the embedding
  EXPECT_EQ(mb.params_per_gpu, 410988800);
  EXPECT_DOUBLE_EQ(mb.model_states, 7397798400.0);
  // per layer sbh 34/2 + 5 a s^2 b / 2 = 27,852,800 + 65,536,000 = 93,388,800;
  // in flight min(P=2, m=32) = 2, 24 layers, + embedding mask sbh/2 = 819,200 x 2.
  EXPECT_DOUBLE_EQ(mb.activations, 4484300800.0);
  EXPECT_DOUBLE_EQ(mb.total(), 14478012928.0);
}

TEST(PlanMemory, RecomputeInterleavingAndDistOptOrder) {
  const GptConfig m = gpt2_1558m();
  Layout l = layout(8, 2, 4);
  l.micro_batch = 2, l.global_batch = 64, l.sequence_parallel = true;
  auto acts = [&](Recompute r, int vpp) {
    Layout x = l;
    x.recompute = r, x.vpp = vpp;
    return estimate_memory(m, x, kMegatron).activations;
  };
  EXPECT_GT(acts(Recompute::None, 1), acts(Recompute::Selective, 1));
  EXPECT_GT(acts(Recompute::Selective, 1), acts(Recompute::Full, 1));
  // Interleaving x2 at P 4: the first stage holds 1 + 3/8 times the layer activations.
  const double layers_1f1b = 4 * 12 * paper_layer_activation_bytes(m, 2, 2, true, Recompute::None);
  EXPECT_NEAR(acts(Recompute::None, 2) - acts(Recompute::None, 1), layers_1f1b * 3.0 / 8 +
                  1.5 * 1024.0 * 2 * 1600 / 2, 1.0);  // + the extra embedding masks in flight
}

TEST(PlanTime, BubbleAndCommFormulas) {
  const GptConfig m = gpt2_1558m();
  Machine mc;  // 1 x 8
  Layout l = layout(8, 1, 4);
  l.micro_batch = 1, l.global_batch = 16;  // m = 8
  TimeBreakdown t = estimate_time(m, l, mc);
  EXPECT_NEAR(t.bubble / (t.compute + t.tp_comm), 3.0 / 8, 1e-12);  // (P-1)/m
  l.vpp = 2;
  t = estimate_time(m, l, mc);
  EXPECT_NEAR(t.bubble / (t.compute + t.tp_comm), 3.0 / 16, 1e-12);  // (P-1)/(v m)
  // DP: fp32 grads of stage 0, 2 (n-1)/n S / bw + latency.
  const double S = 4.0 * double(params_on_stage(m, 1, 4, 0));
  EXPECT_NEAR(t.dp_comm, 2.0 * 1 / 2 * S / 300e9 + 10e-6, 1e-12);
  EXPECT_DOUBLE_EQ(all_reduce_seconds(1e9, 8, 100, 0), 2.0 * 7 / 8 * 1e9 / 100e9);
  // Compute: 6N + 6LTC FLOPs per token at MFU 0.45 x GEMM efficiency on 989 TFLOP/s, over 8 GPUs.
  const double flops = (6.0 * double(m.num_parameters(50257)) + 6.0 * 48 * 1024 * 1600) * 16 * 1024;
  // GEMM efficiency: M = 1 x 1024 rows, n = 1600 columns (tp 1).
  const double eff = 1024.0 / (1024 + 256) * 1600.0 / (1600 + 128);
  EXPECT_DOUBLE_EQ(matmul_efficiency(m, l), eff);
  EXPECT_NEAR(t.compute, flops / 8 / (989e12 * 0.45 * eff), 1e-9);
}

// ZeRO-3's parameter all-gathers by hand: GPT-2 124M (P = 124,475,904,
// 12 layers) on 2 nodes of 8, dp 16, bf16 (2 bytes a parameter gathered),
// one micro-batch a step: 2 m ((n-1)/n P p / bw + L latency).
//   one instance, n = 16 (crosses nodes: 40 GB/s, 25 us):
//     2 (15/16 x 248,951,808 / 40e9 + 12 x 25e-6) = 2 (5.835e-3 + 3e-4) = 12.270 ms
//   2 instances of 8 (one node each: 300 GB/s, 10 us):
//     2 (7/8 x 248,951,808 / 300e9 + 12 x 10e-6) = 2 (7.2611e-4 + 1.2e-4) = 1.692 ms
// and the instances' gradient shards (4 P / 8 bytes) all-reduced across
// the 2 nodes once: 2 x 1/2 x 62,237,952 / 40e9 + 25e-6 = 1.5809 ms.
TEST(PlanTime, Zero3GatherAndInstancesByHand) {
  const GptConfig m = gpt2_124m();
  Machine mc;
  mc.nnodes = 2;
  Layout l = layout(16);
  l.dtype = DType::BF16;
  l.micro_batch = 1, l.global_batch = 16;
  l.distributed_optimizer = true;
  l.zero_stage = 3;
  const double P = 124475904.0, bytes = 2.0 * P;
  EXPECT_NEAR(zero3_param_gather_seconds(m, l, mc), 2 * (15.0 / 16 * bytes / 40e9 + 12 * 25e-6), 1e-12);
  const TimeBreakdown one = estimate_time(m, l, mc);
  EXPECT_DOUBLE_EQ(one.dp_param_gather, zero3_param_gather_seconds(m, l, mc));
  // Reduce-scatter of the fp32 grads over the 16 ranks, a latency per layer, plus the gathers.
  EXPECT_NEAR(one.dp_comm, 15.0 / 16 * 4 * P / 40e9 + 12 * 25e-6 + one.dp_param_gather, 1e-12);
  l.dist_opt_instances = 2;
  EXPECT_NEAR(zero3_param_gather_seconds(m, l, mc), 2 * (7.0 / 8 * bytes / 300e9 + 12 * 10e-6), 1e-12);
  const TimeBreakdown two = estimate_time(m, l, mc);
  EXPECT_NEAR(two.dp_comm, 7.0 / 8 * 4 * P / 300e9 + 12 * 10e-6 + two.dp_param_gather +
                               (2.0 * 1 / 2 * 4 * P / 8 / 40e9 + 25e-6), 1e-12);
  EXPECT_LT(two.dp_comm, one.dp_comm);
  l.zero_stage = 2;  // no parameter gathers per layer
  EXPECT_EQ(zero3_param_gather_seconds(m, l, mc), 0.0);
}

TEST(PlanTime, GroupsLeavingANode) {
  EXPECT_FALSE(group_crosses_nodes(8, 8));
  EXPECT_FALSE(group_crosses_nodes(4, 8));
  EXPECT_TRUE(group_crosses_nodes(16, 8));
  EXPECT_TRUE(group_crosses_nodes(3, 8));  // 3 does not tile a node of 8
}

// The tripod model (the default), piece by piece at GPT-2 124M, bf16.
TEST(PlanMemory, TripodModelPieces) {
  const GptConfig m = gpt2_124m();  // bf16
  // cuDNN attention backward: atomics into an f32 dQ (B T C x 4 bytes); deterministic
  // (--deterministic-mode) keeps dS, B x H x T64^2 x 2 bytes.
  const DType bf16 = DType::BF16;
  EXPECT_DOUBLE_EQ(cudnn_dq_workspace_bytes(m, 32, 1, bf16), 32.0 * 1024 * 768 * 4);
  EXPECT_DOUBLE_EQ(cudnn_dq_workspace_bytes(m, 32, 1, bf16, true), 32.0 * 12 * 1024 * 1024 * 2);  // 768 MiB
  EXPECT_DOUBLE_EQ(cudnn_dq_workspace_bytes(m, 64, 2, bf16, true), 64.0 * 6 * 1024 * 1024 * 2);   // heads split over tp
  // Scratch buffers, b 1 (N 1024), tp 1, 2-byte: ln, dresidual, dln, tmp 4 N C, dqkv + datt + dfc1
  // N (3C + C + F), full_b N C (full_a only under SP) = 1024 x (6912 + 3072) = 10,223,616 elements.
  EXPECT_DOUBLE_EQ(tripod_model_workspace_bytes(m, 1, 1, false, false, Recompute::None, bf16), 2.0 * 10223616);
  // On the last stage the scratch (all but full_b) lives in the logits (N x 50304, larger), + 3 N floats.
  EXPECT_DOUBLE_EQ(tripod_model_workspace_bytes(m, 1, 1, false, true, Recompute::None, bf16),
                   2.0 * 1024 * 768 + 2.0 * 1024 * 50304 + 4.0 * 3 * 1024);
  // Logits past 1 GiB go in equal chunks of rows (multiples of 64): N 65536 x 50304 x 2 bytes = 6.1 GiB
  // -> 7 chunks of ceil(65536 / 7) = 9363 -> 9408 rows.
  EXPECT_EQ(config::head_chunk_rows(65536, 50304, 2), 9408);
  EXPECT_EQ(config::head_chunk_rows(1024, 50304, 2), 1024);
  // Selective recompute adds one layer's att + lse buffer.
  EXPECT_DOUBLE_EQ(tripod_model_workspace_bytes(m, 1, 1, false, false, Recompute::Selective, bf16) -
                       tripod_model_workspace_bytes(m, 1, 1, false, false, Recompute::None, bf16),
                   2.0 * 1024 * 768 + 4.0 * 12 * 1024);

  Layout l = layout(1);
  l.micro_batch = 32, l.global_batch = 32;
  const MemoryBreakdown mb = estimate_memory(m, l);
  EXPECT_DOUBLE_EQ(mb.model_states, 124475904.0 * 18);
  const double acts = 12 * tripod_layer_activation_bytes(m, 32, 1, false, 2) +
                      tripod_stage_extra_activation_bytes(m, 32, 1, false, true, 2);
  EXPECT_DOUBLE_EQ(mb.activations, acts);
  EXPECT_DOUBLE_EQ(mb.workspace, tripod_model_workspace_bytes(m, 32, 1, false, true, Recompute::None, bf16) +
                                     double(32 << 20) + cudnn_dq_workspace_bytes(m, 32, 1, bf16));
  EXPECT_DOUBLE_EQ(mb.reserved, double(1 << 30));
  EXPECT_DOUBLE_EQ(mb.allocator_peak(), mb.model_states + mb.activations + mb.workspace);
  // tripod's distributed optimizer shards master + Adam state over dp and
  // keeps the reduce-scattered f32 gradient shard and the whole f32 values
  // next to the bf16 copy (Megatron's table: 6 + 12/dp).
  Layout l4 = layout(4);
  l4.micro_batch = 32, l4.global_batch = 128, l4.distributed_optimizer = true;
  EXPECT_DOUBLE_EQ(estimate_memory(m, l4).model_states, 124475904.0 * (10 + 16.0 / 4));
  MemoryOptions meg;
  meg.model = MemoryModelKind::kMegatron;
  EXPECT_DOUBLE_EQ(estimate_memory(m, l4, meg).model_states, 124475904.0 * (6 + 12.0 / 4));
  // 1F1B at pp 4, 8 micro-batches: the first stage holds 4 of its 3 layers (+ input).
  Layout p = layout(4, 1, 4);
  p.micro_batch = 2, p.global_batch = 16;
  const MemoryBreakdown pb = estimate_memory(m, p);
  EXPECT_EQ(pb.stage, 0);  // 4 in flight + the embedding outweigh the last stage's 1 + logits
  EXPECT_DOUBLE_EQ(pb.activations, 4 * (3 * tripod_layer_activation_bytes(m, 2, 1, false, 2) +
                                        tripod_stage_extra_activation_bytes(m, 2, 1, false, false, 2)));
}

// Context parallelism: the whole parameters on every rank, the distributed
// optimizer's shards over dp x cp, activations and scratch of s/cp rows, and
// the K/V ring's 5 buffers of (b, s/cp, 2 G HS).
TEST(PlanMemory, ContextParallelSplitsTheSequence) {
  const GptConfig m = gpt2_124m(), half = gpt_model(12, 768, 12, 512);  // seq 1024 and 512
  Layout cp{config::Layout::make(8, 1, 1, 1, 2)};  // cp 2, dp 4
  cp.micro_batch = 1, cp.global_batch = 4, cp.distributed_optimizer = true;
  Layout ref = layout(4);  // the same rows per rank at cp 1: seq 512, dp 4
  ref.micro_batch = 1, ref.global_batch = 4, ref.distributed_optimizer = true;
  const MemoryBreakdown a = estimate_memory(m, cp), b = estimate_memory(half, ref);
  // Master + Adam + f32 grad shard over dp x cp = 8: 10 + 16 / 8 bytes per parameter.
  EXPECT_DOUBLE_EQ(a.bytes_per_param, 10 + 16.0 / 8);
  EXPECT_EQ(a.params_per_gpu, 124475904);  // all of them: CP splits no parameter
  EXPECT_DOUBLE_EQ(a.activations, b.activations);
  // Ring: 5 x 2 bytes x 512 rows x 2 x 12 heads x 64 = 7,864,320; the first stage's position rows
  // 512 x 768 x (2 + 4) = 2,359,296.
  EXPECT_DOUBLE_EQ(a.workspace - b.workspace, 7864320.0 + 2359296.0);
}

TEST(PlanTime, ContextParallelRing) {
  const GptConfig m = gpt_model(12, 768, 12, 8192);
  Machine mc;
  mc.gpus_per_node = 2;
  Layout one = layout(2), two{config::Layout::make(2, 1, 1, 1, 2)};
  one.micro_batch = two.micro_batch = 1;
  one.global_batch = 2, two.global_batch = 2;
  const TimeBreakdown t1 = estimate_time(m, one, mc), t2 = estimate_time(m, two, mc);
  EXPECT_EQ(t1.cp_comm, 0.0);
  // The same tokens and FLOPs per rank (dp 2: one sequence of 8192 each; cp 2: two micro-batches of
  // 4096 rows), in GEMMs of 4096 instead of 8192 rows: matmul efficiency 4096/4352 instead of 8192/8448.
  EXPECT_NEAR(t2.compute / t1.compute, (8192.0 / 8448) / (4096.0 / 4352), 1e-12);
  // K/V block of 4096 rows x 2 x 768 x 2 bytes = 12.6 MB: 41.9 us at 300 GB/s + 10 us, under one
  // block's attention (2 x 8192^2 x 768 / 2 / (989e12 x 0.45) / 2 = 57.9 us forward, twice that
  // backward against two hops): only the last dK/dV hop per layer is exposed, 2 micro-batches x 12
  // layers x 51.9 us.
  const double hop = 4096.0 * 2 * 768 * 2 / 300e9 + 10e-6;
  EXPECT_NEAR(t2.cp_comm, 2 * 12 * hop, 1e-12);
  EXPECT_FALSE(t2.cp_crosses_nodes);
}

// --cp-comm-type a2a: send and recv of qkv's size and the head split's out
// and d out instead of the ring's 5 K/V blocks, plus the i32 row maps.
TEST(PlanMemory, ContextParallelAllToAllBuffers) {
  const GptConfig m = gpt2_124m();  // seq 1024: 512 rows per cp rank
  Layout ring{config::Layout::make(8, 1, 1, 1, 2)};
  ring.micro_batch = 1, ring.global_batch = 4;
  Layout a2a = ring;
  a2a.cp_comm = config::CpCommType::A2a;
  // qkv 512 x 2304, out 512 x 768: 2 bytes x 2 x (1,179,648 + 393,216) = 6,291,456, and the maps
  // 4 x 4 bytes x (1,179,648 + 393,216) / 64 head rows = 393,216; the ring's 5 x 2 x 512 x 2 x 768 =
  // 7,864,320.
  EXPECT_DOUBLE_EQ(estimate_memory(m, a2a).workspace - estimate_memory(m, ring).workspace,
                   6291456.0 + 393216.0 - 7864320.0);
  EXPECT_DOUBLE_EQ(estimate_memory(m, a2a).activations, estimate_memory(m, ring).activations);
}

// --cp-comm-type a2a: nothing overlaps; per layer and micro-batch qkv and
// out forward, out, d out and d qkv backward, half of each leaving the
// rank at cp 2, and one latency per all-to-all (5).
TEST(PlanTime, ContextParallelAllToAll) {
  const GptConfig m = gpt_model(12, 768, 12, 8192);
  Machine mc;
  mc.gpus_per_node = 2;
  Layout two{config::Layout::make(2, 1, 1, 1, 2)};
  two.micro_batch = 1, two.global_batch = 2, two.cp_comm = config::CpCommType::A2a;
  const double qkv = 4096.0 * 2304 * 2, out = 4096.0 * 768 * 2;
  const double per_layer = (2 * qkv + 3 * out) / 2 / 300e9 + 5 * 10e-6;
  EXPECT_NEAR(estimate_time(m, two, mc).cp_comm, 2 * 12 * per_layer, 1e-12);
  two.recompute = Recompute::Selective;  // the recomputed out goes back once more
  EXPECT_NEAR(estimate_time(m, two, mc).cp_comm, 2 * 12 * (per_layer + out / 2 / 300e9 + 10e-6), 1e-12);
}

TEST(PlanMemory, ChunkSlotsFollowTheSchedule) {
  // 1F1B: rank r keeps min(P - r, m) micro-batches (Megatron's warm-up + 1).
  EXPECT_EQ(chunk_slot_peaks(4, 1, 8, 0), std::vector<int>{4});
  EXPECT_EQ(chunk_slot_peaks(4, 1, 8, 3), std::vector<int>{1});
  EXPECT_EQ(chunk_slot_peaks(4, 1, 2, 0), std::vector<int>{2});
  // Interleaved pp 2, vpp 2, 4 micro-batches, rank 0 (hand-traced order:
  // F0c0 F1c0 F0c1 F1c1 | F2c0 B0c1 F3c0 B1c1 F2c1 B0c0 F3c1 B1c0 | ...):
  // chunk 0 peaks at 4 live, chunk 1 at 2: 6 slots in the per-chunk pools
  // although at most 5 are live at once.
  EXPECT_EQ(chunk_slot_peaks(2, 2, 4, 0), (std::vector<int>{4, 2}));
}

TEST(PlanMemory, MoeLayerByHand) {
  // docs/moe.md, "Memory and the planner". C 64, 8 experts of width 32,
  // top-2, SwiGLU (Fe1 64), a gated shared expert of width 48 (Fs1 96),
  // b 1, s 16: N 16, Re = N k = 32, bf16 (2 bytes), ep 2.
  GptConfig m;
  m.num_layers = 2, m.hidden_size = 64, m.num_attention_heads = 4, m.seq_length = 16, m.vocab_size = 256;
  m.swiglu = true, m.ffn_hidden_size = 256;
  m.moe.num_experts = 8, m.moe.router_topk = 2, m.moe.ffn_hidden_size = 32;
  m.moe.shared_expert_intermediate_size = 48, m.moe.shared_expert_gate = true;
  m.finalize();
  const config::LayerSpec s = m.layer_spec(0);
  ASSERT_TRUE(s.moe());
  // bf16: N C 1024 + 2 N k C 4096 + Re (C + Fe1 + Fe) 32 x 160 = 5120
  //   + N (Fs1 + Fs + C) 16 x 208 = 3328 -> 13,568 x 2 = 27,136;
  // f32: x32 1024 + 2 N E 256 + 3 N k 96 + 2 + E 10 + sort_map Re 32
  //   + gate 4 N 64 = 1482 -> x 4 = 5,928. Together 33,064.
  EXPECT_DOUBLE_EQ(tripod_moe_layer_activation_bytes(s, 1, 16, 2, 2), 33064.0);
  // ep 1: no sort_map (32 x 4 fewer).
  EXPECT_DOUBLE_EQ(tripod_moe_layer_activation_bytes(s, 1, 16, 2, 1), 33064.0 - 128.0);
  // Backward scratch: 4 N (k + E) 640 + 2 x (2 N k C 4096 + 3 Re C 6144 + Re (Fe + Fe1) 3072) = 27,264.
  EXPECT_DOUBLE_EQ(tripod_moe_workspace_bytes(s, 1, 16, 2, 2), 27264.0);
  // A routed expert: fc1 64 x 64 + 64, fc2 64 x 32 + 64 = 6272; 8 per
  // layer, 2 layers: 100,352.
  EXPECT_EQ(expert_params_on_stage(m, 1, 1, 0), 100352);
  EXPECT_EQ(expert_params_on_stage(m, 1, 2, 1), 50176);

  // The whole estimate: the MoE model against the same model with dense
  // layers of the same ffn width. tripod model, dp 2 at ep 2, one micro-batch:
  // each layer's activations differ by the MoE bytes less the dense fc1
  // and act (N (F1 + F) bf16 = 16 x 3 x 256 x 2 = 24,576 with F 256),
  // the workspace by one MoE backward's scratch.
  GptConfig dense = m;
  dense.moe = {};
  dense.finalize();
  Layout l(config::Layout::make(2, 1, 1).with_expert_parallel(2));
  l.dtype = DType::BF16;
  l.global_batch = 2;
  MemoryOptions o;
  o.cuda = false;
  const MemoryBreakdown a = estimate_memory(m, l, o), d = estimate_memory(dense, l, o);
  EXPECT_DOUBLE_EQ(a.activations - d.activations, 2.0 * (33064.0 - 24576.0));
  EXPECT_DOUBLE_EQ(a.workspace - d.workspace, 27264.0);
  // Each rank stores E / ep experts (tripod as Megatron's model): 100,352 / 2
  // fewer parameters, their state at 18 bytes (bf16, edp 1, plain optimizer).
  const int64_t P = params_on_stage(m, 1, 1, 0);
  EXPECT_EQ(a.params_per_gpu, P - 50176);
  EXPECT_DOUBLE_EQ(a.model_states, double(P - 50176) * 18.0);
  o.model = MemoryModelKind::kMegatron;
  const MemoryBreakdown g = estimate_memory(m, l, o);
  EXPECT_EQ(g.params_per_gpu, P - 50176);
  EXPECT_DOUBLE_EQ(g.model_states, double(P - 50176) * 18.0);
  // The distributed optimizer at dp 4, ep 2 (tripod model): the dense part
  // sharded over dp 4 at 10 + 16 / 4 = 14 bytes, the 50,176 local expert
  // parameters over edp 2 at 10 + 16 / 2 = 18 bytes.
  Layout l4(config::Layout::make(4, 1, 1).with_expert_parallel(2));
  l4.dtype = DType::BF16;
  l4.global_batch = 4;
  l4.distributed_optimizer = true;
  o.model = MemoryModelKind::kTripod;
  const MemoryBreakdown z = estimate_memory(m, l4, o);
  EXPECT_EQ(z.params_per_gpu, P - 50176);
  EXPECT_DOUBLE_EQ(z.model_states, double(P - 100352) * 14.0 + 50176.0 * 18.0);

  // The experts split over tp (--expert-tensor-parallel-size = tp 2): a
  // routed expert's piece is fc1 32 x 64 + 32, fc2 64 x 16 and fc2's whole
  // bias 64 = 3168, 16 of them per stage (2 layers x 8): 50,688 of the
  // 100,352 whole-expert parameters params_on_stage counts at tp 2.
  EXPECT_EQ(expert_params_on_stage(m, 2, 1, 0), 50688);
  const int64_t P2 = params_on_stage(m, 2, 1, 0);
  // etp 2, ep 1 on 2 ranks (dp 1, edp 1), plain optimizer at 18 bytes.
  Layout e2(config::Layout::make(2, 2, 1).with_expert_parallel(1, 2));
  e2.dtype = DType::BF16;
  e2.global_batch = 2;
  const MemoryBreakdown t = estimate_memory(m, e2, o);
  EXPECT_EQ(t.params_per_gpu, P2 - 100352 + 50688);
  EXPECT_DOUBLE_EQ(t.model_states, double(P2 - 100352 + 50688) * 18.0);
  // etp 2 x ep 2 at tp 2 x dp 4 (8 ranks, edp 2) with the distributed
  // optimizer: 4 of 8 experts' pieces, 25,344, over edp 2 at 10 + 16/2 = 18
  // bytes; the dense part over dp 4 at 10 + 16/4 = 14.
  Layout e8(config::Layout::make(8, 2, 1).with_expert_parallel(2, 2));
  e8.dtype = DType::BF16;
  e8.global_batch = 4;
  e8.distributed_optimizer = true;
  const MemoryBreakdown u = estimate_memory(m, e8, o);
  EXPECT_EQ(u.params_per_gpu, P2 - 100352 + 25344);
  EXPECT_DOUBLE_EQ(u.model_states, double(P2 - 100352) * 14.0 + 25344.0 * 18.0);
}

// The CPU's f32 copies of bf16 operands (plan::cpu_half_scratch_bytes), for
// the CPU parity model (4 layers, hidden 128, seq 128, vocab 2000 padded to
// 2048, micro-batch 2: N = R = 256 rows, V = 2048):
//   loss head: ce backward 2 R V 4 = 4,194,304; output layer's backward
//   (R V + V C + 2 N C) 4 = 3,407,872; the larger: 4,194,304
//   a layer: fc2's backward (2 N 512 + N 128 + 512 x 128) 4 = 1,441,792
// ZeRO-2 holds the embedding group's f32 gradient (E = 2048 x 128 + 128 x
// 128 positions = 278,528) in the loss head: 1,114,112 + 4,194,304 less the
// layers' moment sharded_working_bytes counts. 0 at fp32.
TEST(PlanMemory, CpuHalfScratchByHand) {
  const GptConfig m = gpt_model(4, 128, 4, 128, 2000);
  Layout l = layout(2);
  l.micro_batch = 2, l.global_batch = 8, l.dtype = DType::BF16;
  EXPECT_DOUBLE_EQ(cpu_half_scratch_bytes(m, l, 0), 4194304.0);
  Layout p = layout(2, 1, 2);  // pp 2: stage 0 has no loss head
  p.micro_batch = 2, p.global_batch = 8, p.dtype = DType::BF16;
  EXPECT_DOUBLE_EQ(cpu_half_scratch_bytes(m, p, 0), 1441792.0);
  l.distributed_optimizer = true, l.zero_stage = 2;
  EXPECT_DOUBLE_EQ(cpu_half_scratch_bytes(m, l, 0), 1114112.0 + 4194304.0 - sharded_working_bytes(m, l, 0));
  l.dtype = DType::F32;
  EXPECT_DOUBLE_EQ(cpu_half_scratch_bytes(m, l, 0), 0.0);
  // On the GPU (o.cuda) nothing is added; on the CPU it is workspace.
  l.dtype = DType::BF16, l.zero_stage = 0, l.distributed_optimizer = false;
  MemoryOptions cpu;
  cpu.cuda = false;
  MemoryOptions gpu;
  EXPECT_DOUBLE_EQ(estimate_memory(m, l, cpu).workspace - 4194304.0,
                   estimate_memory(m, l, gpu).workspace - double(32 << 20) -
                       cudnn_dq_workspace_bytes(m, 2, 1, DType::BF16));
}

}  // namespace
}  // namespace tripod::plan
