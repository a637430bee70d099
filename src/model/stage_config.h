// What one pipeline stage of the model is built with: its layers, its place
// in the pipeline, its tensor-parallel group and its precision and memory
// options (StageConfig), and the activation recomputation mode (Recompute).
// The model (gpt_model.h), its layers (transformer_layer.h) and their
// scratch buffers (workspace.h) all read these; nothing here depends on them.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/ops.h"
#include "comm/communicator.h"
#include "config/gpt_config.h"
#include "config/options.h"

namespace tripod::model {

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
  // The tensor-parallel process group (null: tp size 1). The one source of
  // the tp size and rank for the model, its layers and its ParamStore.
  comm::Communicator* tp = nullptr;
  bool sequence_parallel = false;    // --sequence-parallel (ignored at tp size 1, as Megatron)
  // The context-parallel process group (null: cp size 1): this rank holds
  // 1/cp of every sequence (model/context_parallel.h); the micro-batch's T
  // is then the local T / cp rows, seq_length the whole sequence.
  comm::Communicator* cp = nullptr;
  // --cp-comm-type: empty (p2p) or one for every layer, or one per layer of
  // the whole model (Megatron's list form), indexed by the layer number.
  std::vector<config::CpCommType> cp_comm_type;
  // The expert-parallel group (null: ep size 1): MoE layers run the experts
  // [ep_rank E/ep, (ep_rank + 1) E/ep) and exchange tokens over it.
  comm::Communicator* ep = nullptr;
  // --expert-tensor-parallel-size equal to the tp size (> 1): the routed
  // experts are split over the tp group (fc1 by columns, fc2 by rows) and
  // run on the tokens of the whole group (moe_layer.h); false: unsplit.
  bool expert_tensor_parallel = false;
  int64_t param_buffer_pad = 1;      // flat parameter/gradient buffers padded to a multiple of this
  // false: no flat gradient buffer is allocated (ZeRO-2/-3 bind the
  // gradients per layer, distributed/param_and_grad_buffer.h).
  bool flat_grads = true;
  // false: no flat value buffers either (ZeRO-3: the parameters are
  // initialized straight into each rank's shard, NOTE [Sharded init]).
  bool flat_values = true;
  // Dtype of the weights used for compute and of the activations (--bf16,
  // --fp16). Master weights, gradients and statistics stay f32.
  DType compute_dtype = DType::F32;
  Recompute recompute = Recompute::None;
  // The loss head's logits are computed in row chunks of at most this many
  // bytes (0: one chunk), see head_chunk_rows and NOTE [Loss head].
  int64_t loss_chunk_bytes = int64_t(1) << 30;

  int tp_size() const { return tp ? tp->size() : 1; }
  int cp_size() const { return cp ? cp->size() : 1; }
  int cp_rank() const { return cp ? cp->rank() : 0; }
  int tp_rank() const { return tp ? tp->rank() : 0; }
  config::CpCommType cp_comm_type_of(int64_t layer_number) const {
    if (cp_comm_type.empty()) return config::CpCommType::P2p;
    return cp_comm_type.size() == 1 ? cp_comm_type[0] : cp_comm_type.at(static_cast<size_t>(layer_number));
  }
  // Whether any layer of the whole model uses t (the workspace holds its buffers).
  bool uses_cp_comm_type(config::CpCommType t) const {
    if (cp_comm_type.empty()) return t == config::CpCommType::P2p;
    for (config::CpCommType c : cp_comm_type)
      if (c == t) return true;
    return false;
  }
  int ep_size() const { return ep ? ep->size() : 1; }
  int ep_rank() const { return ep ? ep->rank() : 0; }
  int etp_size() const { return expert_tensor_parallel ? tp_size() : 1; }
  // Sequence parallelism in effect (asked for, and tp size > 1).
  bool sequence_parallel_active() const { return sequence_parallel && tp_size() > 1; }
  // Rows of the residual stream this rank holds for B*T tokens (N_sp).
  int64_t local_rows(int64_t B, int64_t T) const {
    return sequence_parallel_active() ? B * T / tp_size() : B * T;
  }
};

// Rows of one loss-head chunk (the rule lives in config/, which plan/ shares).
using config::head_chunk_rows;

}  // namespace tripod::model
