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
// The layers are TransformerLayers (model/transformer_layer.h); the stage
// holds them plus the embedding, the final norm and the loss head, and its
// forward and backward loop over them. Per micro-batch, forward() fills a
// MicroBatchActs; backward() consumes it.
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
#include "model/fp8_meta.h"
#include "model/layer_params.h"
#include "model/param_gatherer.h"
#include "model/param_table.h"
#include "model/stage_config.h"
#include "model/tensor_parallel.h"
#include "model/transformer_layer.h"

namespace tripod::model {
using config::GptConfig;

// Shapes as in LayerActs (model/transformer_layer.h).
struct MicroBatchActs {
  int64_t B = 0, T = 0;
  int64_t sample_offset = 0;      // global index of the first sample (dropout keys)
  float dloss = 0.f;              // the forward's d loss per token (MoE: the aux losses' scale on recompute)
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
  int64_t local_rows(int64_t B, int64_t T) const { return stage_.local_rows(B, T); }
  // This stage's transformer layers, in order (layer first_layer + i at i).
  const std::vector<TransformerLayer>& layers() const { return layers_; }
  // This stage's parameters as typed handles, resolved at construction.
  const StageParams& stage_params() const { return sp_; }
  // Sequence parallelism leaves LayerNorm gradients partial per tp rank:
  // all-reduce them over tp before the optimizer (Megatron's
  // allreduce_layernorm_grads). No-op otherwise.
  void reduce_sequence_parallel_grads();
  backend::Backend& backend() { return be_; }
  // The FP8 scaling state of this stage's FP8 layers (model/fp8_meta.h);
  // null without --fp8-format or when every local layer keeps high precision.
  Fp8State* fp8_state() { return fp8_.get(); }

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
  // Told before and after every use of a parameter group, on every
  // micro-batch (model/param_gatherer.h); null: parameters always in place.
  // Not owned.
  void set_param_gatherer(ParamGatherer* gatherer) { gatherer_ = gatherer; }
  // Sequence parallelism leaves this parameter's gradient partial per tp
  // rank (the LayerNorms, by role, and the specs marked sequence_parallel);
  // --qk-layernorm's norms are partial at any tp > 1 (each rank normalises
  // its own heads).
  bool has_partial_sp_grad(const Param& p) const {
    return (tp_.sequence_parallel && (is_layernorm(p.spec) || p.spec.sequence_parallel)) ||
           (stage_.tp_size() > 1 && is_qk_layernorm(p.spec));
  }
  // Last stage: the logits (N, V_tp) of the last forward without grad
  // (training overwrites them with their gradient). Only when the head ran
  // in one chunk (N rows within StageConfig::loss_chunk_bytes).
  const Tensor& last_logits() const;

 private:
  void head_forward_backward(MicroBatchActs& acts, bool with_grad, float dloss);
  // Global element index of this rank's first residual element of the
  // micro-batch: the same dropout mask at every layout.
  uint64_t dropout_counter(const MicroBatchActs& mb) const;
  // Context parallelism (model/context_parallel.h): the dropout runs of the
  // local rows, and the learned position embedding's local rows and gradient.
  std::vector<DropoutRun> dropout_runs(const MicroBatchActs& mb) const;
  const Tensor* cp_position_rows();
  void add_cp_position_grad();

  GptConfig config_;
  StageConfig stage_;
  backend::Backend& be_;
  int64_t padded_vocab_;
  std::unique_ptr<ParamStore> params_;
  std::unique_ptr<Workspace> ws_;
  TpContext tp_;
  // Resolved once from params_ (no lookups by name after construction).
  StageParams sp_;
  std::unique_ptr<Fp8State> fp8_;  // before layers_: their linears point into it
  std::vector<TransformerLayer> layers_;  // per local layer
  VocabParallelEmbedding embedding_;   // first stage
  ColumnParallelLinear output_layer_;  // last stage: weight tied to the word embedding, no bias
  VocabParallelCrossEntropy cross_entropy_;
  bool last_head_chunked_ = false;  // the last head ran in more than one chunk
  std::vector<std::vector<size_t>> groups_;  // see param_groups()
  ParamGatherer* gatherer_ = nullptr;
  int embedding_group_ = -1, head_group_ = -1, first_layer_group_ = 0;
};

}  // namespace tripod::model
