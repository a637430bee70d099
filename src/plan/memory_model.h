// Memory model of a parallel layout: bytes per GPU for parameters, gradients
// and optimizer state, activations, and a workspace margin. Used by
// plan/search.h (`tripod plan`) and usable by the trainer to suggest a layout
// after an out-of-memory error.
//
// References:
//  - Megatron-LM docs, "Distributed Optimizer": bytes per parameter
//    (bf16/fp16 params + fp32 grads: 18 replicated, 6 + 12/DP sharded).
//  - Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
//    Transformer Models", Sec. 4: activation bytes per layer (16-bit
//    activations): sbh(34 + 5as/h); with TP sbh(10 + 24/t + 5as/(ht));
//    with SP sbh(34/t + 5as/(ht)); selective recompute drops the 5as term.
//  - Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on
//    GPU Clusters": 1F1B keeps at most P micro-batches in flight on the first
//    stage, the interleaved schedule 1 + (P-1)/(P v) times more.
// docs/plan.md derives each formula and states the assumptions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "config/gpt_config.h"
#include "config/layout.h"
#include "config/options.h"
#include "tensor/dtype.h"

namespace tripod::plan {

// The model is config::GptConfig, finalized (GptConfig::finalize: the
// derived widths filled, the rules checked); its arithmetic (widths, padded
// vocab, parameters, FLOPs per token, per-layer specs) lives there, once.
using config::GptConfig;
using config::Recompute;
using config::recompute_from_string;
using config::to_string;

// A point of the search space: the rank layout (config/layout.h: tp, pp,
// vpp and dp = world / (TP x PP), computed once by config::Layout::make)
// plus what the plan varies beside it. The number of micro-batches per step
// (gradient accumulation) = global / (micro x DP).
struct Layout : config::Layout {
  Layout() = default;
  explicit Layout(const config::Layout& ranks) : config::Layout(ranks) {}

  int64_t micro_batch = 1, global_batch = 1;
  bool sequence_parallel = false;      // ignored at tp 1, as in Megatron
  bool distributed_optimizer = false;  // ZeRO-1 over dp
  // --data-parallel-sharding-strategy beyond optim (docs/zero.md): 2
  // optim_grads (ZeRO-2), 3 optim_grads_params (ZeRO-3); both imply
  // distributed_optimizer. 0: as distributed_optimizer says.
  int zero_stage = 0;
  // --overlap-param-gather under ZeRO-3: the next layer's all-gather runs
  // during this layer (the prefetch), so two layers' parameters are held.
  bool overlap_param_gather = false;
  // --num-distributed-optimizer-instances (hybrid sharding): the sharded
  // state splits over dp x cp / N ranks (one instance), not dp x cp.
  int dist_opt_instances = 1;
  int shard_ranks() const { return dp * cp / std::max(1, dist_opt_instances); }
  Recompute recompute = Recompute::None;
  // --cp-comm-type (cp > 1): the ring, the K/V all-gather or the head all-to-all.
  config::CpCommType cp_comm = config::CpCommType::P2p;
  // Parameters' and activations' dtype: BF16 (--bf16, the default), F16
  // (--fp16) or F32; gradients and optimizer state are f32 in every case.
  DType dtype = DType::BF16;

  int64_t num_microbatches() const { return global_batch / (micro_batch * dp); }
  bool sp() const { return sequence_parallel && tp > 1; }
  std::string str() const;  // "tp2 pp4 dp1 vpp2 mbs1 sp dist-opt recompute=selective"
};

// Throws Error when `m` was not finalized (GptConfig::finalize fills the
// widths the formulas below read).
void check_finalized(const GptConfig& m);

// Bytes per GPU on the busiest pipeline stage.
struct MemoryBreakdown {
  int64_t params_per_gpu = 0;  // parameters held by the busiest stage's rank
  double bytes_per_param = 0;  // model-state bytes per parameter (18, 6 + 12/DP, ...)
  double model_states = 0;     // params + grads + optimizer state
  double activations = 0;      // all micro-batches in flight + loss head
  double workspace = 0;        // library workspaces, scratch buffers (logits, ...), fragmentation
  double reserved = 0;         // outside the caching allocator (CUDA context); tripod model only
  int stage = 0;               // which pipeline stage is the busiest
  double total() const { return model_states + activations + workspace + reserved; }
  // What the caching allocator's peak (mem_peak_bytes) should read.
  double allocator_peak() const { return total() - reserved; }
};

// Model-state bytes per parameter (Megatron's distributed optimizer table,
// with fp32 gradients as tripod keeps them):
//   bf16/fp16: 2 (param) + 4 (grad) + 12 (fp32 master + Adam m, v) = 18,
//              sharded: 6 + 12/DP;  fp32: 16, sharded: 8 + 8/DP.
// tripod's distributed optimizer (`tripod` below) also keeps the f32
// reduce-scattered gradient shard (distributed/param_and_grad_buffer.h) and
// an f32 value shard: + 16/DP for every precision; and it keeps the whole
// f32 values (model/param_table.h's ParamStore) next to the bf16/fp16
// compute copy: 10 + 16/DP at bf16/fp16, 8 + 16/DP at fp32.
//   ZeRO-2 (zero_stage 2) keeps the param (2, fp32: 4; tripod at bf16/fp16
//   the f32 values and the compute copy, 6) whole and shards the grad too:
//   + 16/DP; ZeRO-3 keeps nothing whole: Megatron-FSDP (bf16
//   param + fp32 grad + 12) / DP = 18/DP, tripod (fp32 param shard, grad
//   shard, m, v) 16/DP, fp32 16/DP. The full-size buffers of the layers in
//   use come on top (sharded_working_bytes).
double model_state_bytes_per_param(DType p, bool distributed_optimizer, int dp, bool tripod = false,
                                   int zero_stage = 0);
// ZeRO-2/-3: the full-size buffers live at once on pipeline stage `stage`
// (distributed/param_and_grad_buffer.h, NOTE [Sharded gradients] and
// [Sharded parameters]), with E = the word embedding's (or the untied
// output layer's) parameters per tp rank where the stage holds them (and,
// on stage 0, the learned position embedding of the same group), else 0,
// and G = the largest layer's. The gradients of E + 2 G elements are bound
// at once (the embedding's from the loss head to the end of the backward,
// or for the step with pp > 1; the layer computing and the one being
// reduced):
//   ZeRO-2: (E + 2 G) x 4
//   ZeRO-3: the larger of
//     a layer's backward     (E + 2 G) x 4 + G x p  (2 G x p with the
//                            prefetch: the next layer's gather in flight)
//     the embedding's        (E + G) x 4 + E x p    (its backward on stage
//                            0, the loss head on the last stage)
//   with p the gathered compute copy's bytes (2 for bf16/fp16: NOTE
//   [Compute-dtype all-gather] in distributed/param_and_grad_buffer.h; 4 for
//   fp32; the LayerNorms' few fp32 values not counted).
// 0 for zero_stage < 2. Measured on the CPU within 3% of the allocator peak
// (tests/cli/test_plan_cpu_memory.cpp, docs/plan.md).
double sharded_working_bytes(const GptConfig& m, const Layout& l, int stage);
// The CPU backend at bf16/fp16 (backend/cpu/half.h): each op widens its
// half-precision operands to f32 copies for the call, so the largest op's
// copies come on top of the GPU's count. On the last stage the loss head's:
// the cross-entropy backward widens the logits chunk (R rows of V = V_pad/tp)
// and dlogits, 2 R V x 4; the output layer's backward dout, weight, input
// and dinp, (R V + V C + 2 N C) x 4, the larger; ZeRO-2 (-3) then also hold
// the embedding group's f32 gradient E x 4 (and its gathered copy E x 2),
// while sharded_working_bytes W counts the layers' moment: max(0, that - W).
// Elsewhere (and at least) a layer's largest linear backward,
// (2 N in + N out + in out) x 4 over qkv, proj, fc1, fc2 per tp rank. 0 at
// fp32. Measured within 1% at dp 2, dp 4 and tp 2 x dp 2 for every
// sharding strategy (tests/cli/test_plan_cpu_memory.cpp).
double cpu_half_scratch_bytes(const GptConfig& m, const Layout& l, int stage);
// The model as one context-parallel rank runs it: seq_length / cp rows of
// every sequence (cp 1: m itself). The memory and time models read it.
GptConfig local_sequence(const GptConfig& m, int cp);

// Parameters held by one GPU of pipeline stage `stage` (0..pp-1), with even
// layer split and TP sharding of the linear layers and the vocabulary.
// Per layer from GptConfig::layer_spec (config/layer_spec.h): norms, the
// position embedding and row-parallel biases are replicated over tp. With pp > 1 the last stage keeps its own copy of the word
// embedding for the tied output layer (as Megatron does).
int64_t params_on_stage(const GptConfig& m, int tp, int pp, int stage);

// The routed experts' parameters among those params_on_stage counts (the
// MoE layers' mlp.experts.local_experts.*, whole at tp 1; `tp` here is the
// split of each expert, --expert-tensor-parallel-size, fc2's bias whole):
// the part expert parallelism splits over ep ranks, each holding E / ep experts.
int64_t expert_params_on_stage(const GptConfig& m, int tp, int pp, int stage);

// tripod model, MoE (docs/moe.md, "Memory and the planner"): what one MoE
// layer keeps for one micro-batch (model::MoeActs::bytes()) in place of the
// dense MLP's fc1 and act (N (F1 + F) / t), with N = b s tokens, k the top-k,
// E experts of width Fe (Fe1 = 2 Fe under SwiGLU), the shared expert's Fs
// (Fs1), and Re = N k the rows this rank's experts run (the ep ranks'
// N k rows each when the load is even):
//   act * [ N C (x) + 2 N k C (xp, y) + Re (C + Fe1 + Fe) (xe, fc1, act)
//           + N (Fs1 + Fs + C) (shared expert) ]
//   + 4 * [ N C (x32, only when act != 4) + 2 N E (logits, daux)
//           + 3 N k (probs, indices, row_map) + 2 + E (losses, counts)
//           + Re (sort_map, only at ep > 1) + 4 N (the shared-expert gate) ]
double tripod_moe_layer_activation_bytes(const config::LayerSpec& s, int64_t micro_batch, int64_t seq_length,
                                         int act_bytes, int ep);
// tripod model: the MoE layer's backward scratch at its peak (the dispatch
// buffers; model/moe_layer.cpp): d probs, d logits 4 N (k + E); dy, dxp
// 2 N k C; dye, dxe 2 Re C and, at ep > 1, the all-to-all's receive buffer
// Re C; one expert's dact, dfc1 at most Re (Fe + Fe1); in the compute dtype.
double tripod_moe_workspace_bytes(const config::LayerSpec& s, int64_t micro_batch, int64_t seq_length, int act_bytes,
                                  int ep);

// Korthikanti et al. activation bytes of ONE transformer layer for ONE
// micro-batch, 16-bit activations, generalised from F = 4h to any FFN width:
//   no TP:  sbh(18 + 4F/h) + 5as^2 b
//   TP:     sbh(10 + (8 + 4F/h)/t) + 5as^2 b / t
//   TP+SP:  sbh(18 + 4F/h)/t + 5as^2 b / t
// selective drops the 5as^2 b term; full keeps only the layer input 2sbh
// (2sbh/t with SP). With F = 4h these are the paper's 34, 10 + 24/t, 34/t.
double paper_layer_activation_bytes(const GptConfig& m, int64_t micro_batch, int tp, bool sp,
                                    Recompute r);

// tripod's own per-layer activation bytes (model::MicroBatchActs, what the
// CPU and CUDA backends keep for backward): flash-style attention (no T x T
// buffers; the softmax log-sum-exp (b, a/t, s) instead), no dropout masks
// (regenerated from the Philox counter). Activations in the compute dtype
// (act_bytes: 4 for fp32, 2 for bf16/fp16), statistics in fp32. With
// N = b s and N_sp = N/t under SP, else N:
//   act * [ 4 N_sp h  (ln1, res1, ln2, out) + N (3h + h + 2F) / t  (qkv, att, fc1, gelu) ]
//   + 4 * [ 4 N_sp  (ln1/ln2 mean, rstd) + N a / t  (lse) ]
// Selective recompute drops att and lse; full keeps only out (act N_sp h).
double tripod_layer_activation_bytes(const GptConfig& m, int64_t micro_batch, int tp, bool sp,
                                     int act_bytes = 4, Recompute r = Recompute::None);
// Bytes of one micro-batch outside the layers, as MicroBatchActs::bytes()
// counts: the stage input (N_sp, h) and, on the last stage, the final norm
// (N_sp h act + 2 N_sp fp32), the per-token losses (N fp32) and d lnf (N_sp h act).
double tripod_stage_extra_activation_bytes(const GptConfig& m, int64_t micro_batch, int tp, bool sp,
                                           bool post_process, int act_bytes = 4);

// Micro-batches whose activations the first pipeline stage holds at its
// peak, in units of (layers per stage) x micro-batch: 1F1B min(P, m);
// interleaved min(m v, 2(P-1) + (v-1)P + 1) / v chunks of L/(P v) layers,
// i.e. P (1 + (P-1)/(P v)) when m is large. 1 without pipelining.
double inflight_microbatches(int pp, int vpp, int64_t num_microbatches);
// tripod's activation slots per model chunk on pipeline rank `rank` (each
// chunk's peak of live micro-batches over the schedule; memory_model.cpp).
std::vector<int> chunk_slot_peaks(int pp, int vpp, int64_t num_microbatches, int rank);

// kTripod (default): what tripod itself allocates -- flash-style
// activations (MicroBatchActs::bytes()), the model's scratch buffers
// (model/workspace.h: activation gradients, logits (N, V_pad/tp) in the
// compute dtype, recompute buffers), cuBLASLt's 32 MiB workspace, cuDNN's
// deterministic-dQ workspace B*H*T^2*2 bytes when <= 1 GiB (bf16/fp16), and
// 1 GiB outside the allocator for the CUDA context (as the CUDA allocator
// reserves per process). kMegatron: Korthikanti et al.'s activations
// (attention scores stored), for planning a Megatron-LM run.
enum class MemoryModelKind { kTripod, kMegatron };
std::string to_string(MemoryModelKind k);                       // "tripod" | "megatron"
MemoryModelKind memory_model_from_string(const std::string& s);  // throws Error on unknown names

struct MemoryOptions {
  MemoryModelKind model = MemoryModelKind::kTripod;
  double workspace_fixed_gib = -1;     // < 0: the model's default (megatron 2.0; tripod 1.0, the CUDA context)
  double fragmentation = 0.10;         // megatron model: allocator slack, fraction of activations
  bool cuda = true;                    // tripod model: CUDA workspaces (cuBLASLt, cuDNN); false for the CPU device
  bool deterministic = false;          // tripod model: --deterministic-mode (cuDNN keeps dS for dQ)
};

// tripod model: bytes of one model chunk's scratch buffers (model/workspace.h),
// sized for micro-batch b; the logits (N, V_pad/tp) only with post_process.
// Activations in `dtype`; the loss head's logits in chunks of
// config::head_chunk_rows (the model's default 1 GiB).
double tripod_model_workspace_bytes(const GptConfig& m, int64_t micro_batch, int tp, bool sp, bool post_process,
                                    Recompute r, DType dtype);
// tripod model: the cuDNN attention backward's own workspace
// (cuda/cudnn_attention.cpp), bf16/fp16 only: by default dQ is summed
// with atomics into an f32 accumulator of B * T * H/tp * HS * 4 bytes;
// under --deterministic-mode dS is kept instead, B * H/tp * T64^2 * 2
// bytes (T rounded up to 64). 0 for F32.
double cudnn_dq_workspace_bytes(const GptConfig& m, int64_t micro_batch, int tp, DType dtype,
                                bool deterministic = false);

// tripod model, FP8 (--fp8-format, docs/fp8.md): what the FP8 layers among
// the global layers [first_layer, first_layer + num_layers) of one model
// chunk add (GptConfig::layer_spec(i).fp8 says which), per tp rank, with
// N = b s, Q, F1 the qkv and fc1 widths:
//   weights     the FP8 copy of each linear's weight and of its transpose,
//               2 C (Q + C + F1 + F) / t bytes per FP8 layer;
//   per micro-batch (not under full recompute) the FP8 transposes of the
//               four linears' inputs kept from forward for the weight
//               gradients, N (C + C/t + C + F/t) bytes per FP8 layer, and
//               their scale slots (64 bytes); none under --no-fp8-wgrad
//               (the weight gradients in the compute dtype read the
//               compute-dtype inputs every layer keeps);
//   scratch     the casts' buffers, once per chunk with an FP8 layer: x's
//               FP8 copy N max(C, F/t) (and its transpose under full
//               recompute, which casts x again in backward, not under
//               --no-fp8-wgrad), dy's copy and transpose 2 N max(Q/t, C,
//               F1/t) (the copy alone under --no-fp8-wgrad).
//   with --fp8-dot-product-attention (model/fp8_meta.h Fp8Attention):
//               per micro-batch (without recompute) the FP8 attention's
//               inputs to its backward, qkv8 and att8, N (Q + C) / t
//               bytes per FP8 layer; in scratch the backward's dout and
//               dqkv codes N (C + Q) / t, and under recompute (selective
//               or full) the workspace's qkv8 and att8 of the layer being
//               recomputed, N (Q + C) / t more.
//   param_gather with --fp8-param-gather (distributed/fp8_param_gather.h),
//               over d = the ranks that shard the buffer (shard_ranks; 0:
//               no distributed optimizer, or ZeRO-3, where the flag does
//               not apply): the gathered codes take the place of the
//               weights' FP8 copies (counted above), and the step adds
//               buffers that live for a while, the largest of: the FP8
//               gather's packed send and receive buffers, W (1 + 1/d)
//               bytes (W = n C (Q + C + F1 + F) / t, the chunk's FP8 weight
//               elements, `gathered`), and the dgrad transpose made from
//               the codes, an f32 and an FP8 copy of the largest weight,
//               5 C max(Q, C, F1, F) / t. (The f32 gather of the other
//               parameters, packed, 4 (d + 1) (P - W) unless P - W is over
//               half the piece P / d, is estimate_memory's: it needs the
//               stage's parameter count P.) The bf16 compute copy of the FP8
//               weights stays in the parameters (model_state_bytes_per_param):
//               nothing reads it, but the flat buffer holds every parameter.
//   swiglu_act_saved  per micro-batch, what FP8 removes from the dense
//               layer's activations: under delayed scaling a SwiGLU MLP
//               without fc1 bias (not under full recompute) casts SwiGLU's
//               output inside its kernel and keeps no compute-dtype copy,
//               act_bytes N F / t per dense FP8 layer (NOTE [FP8 SwiGLU
//               cast] in model/transformer_layer.cpp); 0 under
//               --no-fp8-wgrad (fc2's wgrad reads the activation).
//   attention_act_saved  with --fp8-dot-product-attention and no
//               recomputation: the compute-dtype qkv and attention output
//               are not kept (the backward reads their FP8 copies; 0 under
//               --no-fp8-wgrad, whose projection wgrad reads the output),
//               act_bytes N (Q + C) / t per FP8-attention layer (NOTE [FP8
//               attention keeps its codes] in model/transformer_layer.cpp).
struct Fp8Bytes {
  double weights = 0, per_microbatch = 0, scratch = 0, param_gather = 0, gathered = 0, swiglu_act_saved = 0,
         attention_act_saved = 0;
};
Fp8Bytes tripod_fp8_bytes(const GptConfig& m, int64_t micro_batch, int tp, Recompute r, int64_t first_layer,
                          int64_t num_layers, int shard_ranks = 1, int act_bytes = 2);

// Full estimate for the busiest stage (the larger of the first and last),
// with the model o.model. The tripod model counts FP8 (Fp8Bytes): the
// kept transposes with the activations, weights and scratch with the
// workspace.
MemoryBreakdown estimate_memory(const GptConfig& m, const Layout& l, const MemoryOptions& o = {});

}  // namespace tripod::plan
