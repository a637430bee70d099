// GPT-2 as Megatron builds it: learned position embeddings, pre-LayerNorm
// transformer layers, a final LayerNorm and an output layer tied to the
// word embedding, with explicit forward and backward per layer (llm.c style).
//
// A GptModel is one pipeline stage: layers [first_layer, first_layer +
// num_local_layers), with the embedding when it is the first stage
// (pre_process) and the final norm + loss when it is the last (post_process),
// as Megatron's GPTModel(pre_process, post_process). With one stage it is
// the whole model.
//
// Per micro-batch, forward() fills a MicroBatchActs; backward() consumes it.
// On the last stage, forward(..., with_grad=true) also runs the loss head's
// backward right away (logits never outlive the call: see NOTE [Loss head]).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backend/ops.h"
#include "comm/communicator.h"
#include "config/gpt_config.h"
#include "model/layer_params.h"
#include "model/param_table.h"
#include "model/tensor_parallel.h"

namespace tripod::model {
using config::GptConfig;

// Activation recomputation (Megatron's --recompute-granularity):
//   Selective  the attention core's output and log-sum-exp are not kept per
//              micro-batch; backward recomputes them from the stored qkv
//              (--recompute-activations).
//   Full       only each layer's output (the next layer's input) is kept;
//              backward reruns the layer's forward from its input first
//              (--recompute-granularity full, every layer: Megatron's
//              uniform method with --recompute-num-layers 1).
// Dropout masks come from counters (backend/philox.h), so a recomputed
// forward is bit-identical to the first one.
using config::Recompute;  // config/options.h

struct StageConfig {
  int64_t first_layer = 0;
  int64_t num_local_layers = -1;  // -1: all layers
  bool pre_process = true;        // holds the embedding
  bool post_process = true;       // holds the final norm and the loss
  int tp_size = 1, tp_rank = 0;
  comm::Communicator* tp = nullptr;  // the tensor-parallel group (null: tp size 1)
  bool sequence_parallel = false;    // --sequence-parallel (ignored at tp size 1, as Megatron)
  int64_t param_buffer_pad = 1;      // flat parameter/gradient buffers padded to a multiple of this
  // Dtype of the weights used for compute and of the activations (--bf16,
  // --fp16). Master weights, gradients and statistics stay f32.
  DType compute_dtype = DType::F32;
  Recompute recompute = Recompute::None;
  // The loss head's logits are computed in row chunks of at most this many
  // bytes (0: one chunk), see head_chunk_rows and NOTE [Loss head].
  int64_t loss_chunk_bytes = int64_t(1) << 30;
};

// Rows of one loss-head chunk for N rows of V_tp logits of elem_bytes each:
// N when the (N, V_tp) logits fit in max_bytes (or max_bytes is 0), else N
// split into the fewest equal chunks that fit, rounded up to a multiple of
// 64 rows (the last chunk takes the rest).
int64_t head_chunk_rows(int64_t N, int64_t V_tp, int64_t elem_bytes, int64_t max_bytes);

// Shapes: N = B*T; N_sp = N / tp with sequence parallelism, else N. The
// residual stream and LayerNorm outputs are (N_sp, C); everything between a
// column- and a row-parallel linear is (N, *_tp). Activations are in the
// compute dtype, statistics (mean, rstd, lse, losses) in f32. Under
// recompute the tensors that are not kept stay undefined (see Recompute).
struct LayerActs {
  Tensor ln1, ln1_mean, ln1_rstd;  // (N_sp,C), (N_sp), (N_sp); ln1 and ln2 are workspace (NOTE [LayerNorm outputs])
  Tensor qkv;                      // (N, 3*C_tp)
  Tensor att, lse;                 // (N, C_tp), (B, NH_tp, T)
  Tensor res1;                     // (N_sp,C) residual after attention
  Tensor ln2, ln2_mean, ln2_rstd;  // (N_sp,C), (N_sp), (N_sp)
  Tensor fc1, gelu;                // (N, F_tp) pre- and post-activation
  Tensor out;                      // (N_sp,C) layer output (residual after MLP)
};

struct MicroBatchActs {
  int64_t B = 0, T = 0;
  int64_t sample_offset = 0;      // global index of the first sample (dropout keys)
  Tensor tokens, targets;         // (B,T) i32 on device; targets only on the last stage
  Tensor input;                   // (N_sp,C) embedding output, or the hidden state received
  std::vector<LayerActs> layers;
  Tensor lnf, lnf_mean, lnf_rstd; // last stage: final norm (N_sp,C), (N_sp), (N_sp)
  Tensor losses;                  // last stage: (N) per-token loss (same on every tp rank)
  Tensor dlnf;                    // last stage, training: d loss / d lnf (N_sp,C)
  Tensor grad_input;              // after backward on a non-first stage: d loss / d input (N_sp,C)
  size_t bytes() const;           // activation bytes held
  const Tensor& output() const { return layers.empty() ? input : layers.back().out; }
};

class GptModel {
 public:
  GptModel(const GptConfig& config, const StageConfig& stage, backend::Backend& be);
  ~GptModel();
  GptModel(const GptModel&) = delete;
  GptModel& operator=(const GptModel&) = delete;

  const GptConfig& config() const { return config_; }
  const StageConfig& stage() const { return stage_; }
  ParamStore& params() { return *params_; }
  int64_t padded_vocab() const { return padded_vocab_; }
  bool sequence_parallel() const { return tp_.sequence_parallel; }
  // Rows of the residual stream this rank holds for B*T tokens (N_sp).
  int64_t local_rows(int64_t B, int64_t T) const { return tp_.sequence_parallel ? B * T / stage_.tp_size : B * T; }
  // This stage's parameters as typed handles, resolved at construction.
  const StageParams& stage_params() const { return sp_; }
  // Sequence parallelism leaves LayerNorm gradients partial per tp rank:
  // all-reduce them over tp before the optimizer (Megatron's
  // allreduce_layernorm_grads). No-op otherwise.
  void reduce_sequence_parallel_grads();
  backend::Backend& backend() { return be_; }

  // Every parameter of the whole model (global shapes, shard rules of the
  // tensor-parallel layers that use them, roles), in a fixed order.
  static std::vector<ParamSpec> all_param_specs(const GptConfig& config, int64_t padded_vocab);

  // Allocates activation buffers for micro-batches of (B, T).
  MicroBatchActs make_acts(int64_t B, int64_t T) const;

  // Called with indices into params().params(), a group at a time, in the
  // order the model reaches them (see NOTE [Parameter hooks] in gpt_model.cpp).
  using ParamHook = std::function<void(const std::vector<size_t>& params)>;

  // First stage: acts.tokens set; other stages: acts.input set by the caller.
  // Last stage: acts.targets set; fills acts.losses. With with_grad, the loss
  // head's backward runs here with d loss_i = dloss for every token.
  // before_use (optional): called before the forward first reads each group
  // of parameters (data-parallel param all-gathers wait there).
  void forward(MicroBatchActs& acts, bool with_grad, float dloss, uint64_t dropout_seed,
               const ParamHook* before_use = nullptr);
  // Last stage: starts from acts.dlnf; other stages: from grad_output (N,C).
  // Accumulates parameter gradients; fills acts.grad_input on non-first stages.
  // grads_ready (optional): called as soon as this backward has finished
  // writing each group's gradients (data-parallel bucket reductions start there).
  void backward(MicroBatchActs& acts, const Tensor* grad_output, uint64_t dropout_seed,
                const ParamHook* grads_ready = nullptr);
  // The groups the hooks are called with, in forward order: [embedding],
  // one per local layer, [final norm (+ the tied output weight on a last
  // stage without the embedding)]. Every parameter of the stage is in at
  // least one group.
  const std::vector<std::vector<size_t>>& param_groups() const { return groups_; }
  // Sequence parallelism leaves this parameter's gradient partial per tp
  // rank (the LayerNorms, by role).
  bool has_partial_sp_grad(const Param& p) const { return tp_.sequence_parallel && is_layernorm(p.spec); }
  // Last stage: the logits (N, V_tp) of the last forward without grad
  // (training overwrites them with their gradient). Only when the head ran
  // in one chunk (N rows within StageConfig::loss_chunk_bytes).
  const Tensor& last_logits() const;

 private:
  struct Workspace;
  void layer_forward(int64_t l, const Tensor& x, LayerActs& a, const MicroBatchActs& mb, uint64_t seed);
  // The buffers layer forward/backward work on: the stored ones, with the
  // workspace standing in for what recompute does not keep (handles only).
  LayerActs working_acts(const LayerActs& stored, bool for_backward) const;
  void layer_backward(int64_t l, const Tensor& x, LayerActs& a, Tensor& dresidual,
                      const MicroBatchActs& mb, uint64_t seed);
  void head_forward_backward(MicroBatchActs& acts, bool with_grad, float dloss);
  uint64_t dropout_counter(const MicroBatchActs& mb) const;

  GptConfig config_;
  StageConfig stage_;
  backend::Backend& be_;
  int64_t padded_vocab_;
  std::unique_ptr<ParamStore> params_;
  std::unique_ptr<Workspace> ws_;
  TpContext tp_;
  // Resolved once from params_ (no lookups by name after construction).
  struct LayerLinears {
    ColumnParallelLinear linear_qkv;
    RowParallelLinear linear_proj;
    ColumnParallelLinear linear_fc1;
    RowParallelLinear linear_fc2;
  };
  StageParams sp_;
  std::vector<LayerLinears> linears_;  // per local layer
  VocabParallelEmbedding embedding_;   // first stage
  ColumnParallelLinear output_layer_;  // last stage: weight tied to the word embedding, no bias
  VocabParallelCrossEntropy cross_entropy_;
  bool training_ = false;
  bool last_head_chunked_ = false;  // the last head ran in more than one chunk
  std::vector<std::vector<size_t>> groups_;  // see param_groups()
  int embedding_group_ = -1, head_group_ = -1, first_layer_group_ = 0;  // dropout only while training (forward with grad)
};

}  // namespace tripod::model
