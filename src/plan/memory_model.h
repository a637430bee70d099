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

#include <cstdint>
#include <string>
#include <vector>

namespace tripod::plan {

enum class Precision { kBf16, kFp16, kFp32 };
enum class Recompute { kNone, kSelective, kFull };

std::string to_string(Recompute r);  // "none" | "selective" | "full"
Recompute recompute_from_string(const std::string& s);  // throws Error on unknown names

// The model, with Megatron's flag names. ffn_hidden_size 0 -> 4 * hidden.
struct ModelSpec {
  int64_t num_layers = 12;
  int64_t hidden_size = 768;
  int64_t num_attention_heads = 12;
  int64_t ffn_hidden_size = 0;
  int64_t seq_length = 1024;
  int64_t max_position_embeddings = 0;  // 0 -> seq_length
  int64_t vocab_size = 50257;
  int64_t make_vocab_size_divisible_by = 128;
  Precision precision = Precision::kBf16;
  // The Llama-family options (config/gpt_config.h; docs/llama.md).
  int64_t num_query_groups = 0;  // K/V heads with --group-query-attention (0: heads)
  bool swiglu = false;           // fc1 2F wide, three F x C matrices
  bool untie_embeddings = false; // an output layer of its own
  bool add_bias_linear = true;
  bool rmsnorm = false;          // no norm biases, one statistic
  bool learned_positions = true; // false with --position-embedding-type rope|none

  // Megatron's default MLP width: 4C, with SwiGLU 2/3 of it rounded down to 64.
  int64_t ffn() const {
    return ffn_hidden_size > 0 ? ffn_hidden_size : (swiglu ? (4 * hidden_size * 2 / 3) / 64 * 64 : 4 * hidden_size);
  }
  int64_t groups() const { return num_query_groups > 0 ? num_query_groups : num_attention_heads; }
  int64_t qkv_width() const { return (num_attention_heads + 2 * groups()) * (hidden_size / num_attention_heads); }
  int64_t fc1_width() const { return swiglu ? 2 * ffn() : ffn(); }
  int64_t max_positions() const { return max_position_embeddings > 0 ? max_position_embeddings : seq_length; }
  // Megatron's padding: smallest multiple of divisible_by * tp >= vocab.
  int64_t padded_vocab(int tp) const;
  // Parameters of the whole model at vocab V (a tied output layer counted
  // once). Same count as config::GptConfig::num_parameters.
  int64_t num_parameters(int64_t vocab) const;
  // Training FLOPs per token, 6N + 6LTC (N at the unpadded vocab, less an
  // untied input embedding; the attention term counts the full T x T, as
  // llm.c and PaLM do). Same as config::GptConfig::flops_per_token.
  double flops_per_token() const;
  void validate() const;  // throws Error naming the flag
};

// A point of the search space. DP = world / (TP x PP); the number of
// micro-batches per step (gradient accumulation) = global / (micro x DP).
struct Layout {
  int tp = 1, pp = 1, dp = 1;
  int vpp = 1;  // virtual pipeline stages (model chunks) per pipeline rank
  int64_t micro_batch = 1, global_batch = 1;
  bool sequence_parallel = false;      // ignored at tp 1, as in Megatron
  bool distributed_optimizer = false;  // ZeRO-1 over dp
  Recompute recompute = Recompute::kNone;

  int64_t num_microbatches() const { return global_batch / (micro_batch * dp); }
  bool sp() const { return sequence_parallel && tp > 1; }
  std::string str() const;  // "tp2 pp4 dp1 vpp2 mbs1 sp dist-opt recompute=selective"
};

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
// reduce-scattered gradient shard (distributed/param_and_grad_buffer.h) and,
// at fp32 too, an f32 value shard: kept + 16/DP for every precision.
double model_state_bytes_per_param(Precision p, bool distributed_optimizer, int dp, bool tripod = false);

// Parameters held by one GPU of pipeline stage `stage` (0..pp-1), with even
// layer split and TP sharding of the linear layers and the vocabulary.
// LayerNorms, the position embedding and row-parallel biases are replicated
// over tp. With pp > 1 the last stage keeps its own copy of the word
// embedding for the tied output layer (as Megatron does).
int64_t params_on_stage(const ModelSpec& m, int tp, int pp, int stage);

// Korthikanti et al. activation bytes of ONE transformer layer for ONE
// micro-batch, 16-bit activations, generalised from F = 4h to any FFN width:
//   no TP:  sbh(18 + 4F/h) + 5as^2 b
//   TP:     sbh(10 + (8 + 4F/h)/t) + 5as^2 b / t
//   TP+SP:  sbh(18 + 4F/h)/t + 5as^2 b / t
// selective drops the 5as^2 b term; full keeps only the layer input 2sbh
// (2sbh/t with SP). With F = 4h these are the paper's 34, 10 + 24/t, 34/t.
double paper_layer_activation_bytes(const ModelSpec& m, int64_t micro_batch, int tp, bool sp,
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
double tripod_layer_activation_bytes(const ModelSpec& m, int64_t micro_batch, int tp, bool sp,
                                     int act_bytes = 4, Recompute r = Recompute::kNone);
// Bytes of one micro-batch outside the layers, as MicroBatchActs::bytes()
// counts: the stage input (N_sp, h) and, on the last stage, the final norm
// (N_sp h act + 2 N_sp fp32), the per-token losses (N fp32) and d lnf (N_sp h act).
double tripod_stage_extra_activation_bytes(const ModelSpec& m, int64_t micro_batch, int tp, bool sp,
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
double tripod_model_workspace_bytes(const ModelSpec& m, int64_t micro_batch, int tp, bool sp, bool post_process,
                                    Recompute r);
// Rows of one loss-head chunk (model/gpt_model.h head_chunk_rows, 1 GiB chunks).
int64_t head_chunk_rows_like_model(int64_t N, int64_t V_tp, int64_t elem_bytes);
// tripod model: the cuDNN attention backward's own workspace
// (cuda/cudnn_attention.cpp), bf16/fp16 only: by default dQ is summed
// with atomics into an f32 accumulator of B * T * H/tp * HS * 4 bytes;
// under --deterministic-mode dS is kept instead, B * H/tp * T64^2 * 2
// bytes (T rounded up to 64).
double cudnn_dq_workspace_bytes(const ModelSpec& m, int64_t micro_batch, int tp, bool deterministic = false);

// Full estimate for the busiest stage (the larger of the first and last),
// with the model o.model.
MemoryBreakdown estimate_memory(const ModelSpec& m, const Layout& l, const MemoryOptions& o = {});

}  // namespace tripod::plan
