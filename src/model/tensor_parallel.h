// Megatron's tensor-parallel layers (megatron/core/tensor_parallel/layers.py,
// cross_entropy.py), each owning its matmul, its bias, its communication
// points (parallel/tp_regions.h) and its shard rule, for explicit forward
// and backward passes. They hold handles to parameters of a ParamStore
// (resolved once, model/layer_params.h) and to the tp group; the caller
// passes the activation buffers. With tp size 1 every comm point is a no-op.
//
// Shapes: N = B*T rows; N_sp = N / tp under sequence parallelism, else N.
// IC/OC: input/output features; _tp: this rank's shard.
//
//   ColumnParallelLinear  Y_r (N, OC_tp) = X A_r^T + b_r    weight [OC/tp, IC], bias [OC/tp]
//       X enters by copy_to_tensor_model_parallel_region (f) or, under SP,
//       gather_from_sequence_parallel_region. gather_output is never used.
//   RowParallelLinear     Y (N_sp, OC) = sum_r X_r B_r^T + b  weight [OC, IC/tp], bias [OC]
//       input_is_parallel; the partial products leave by
//       reduce_from_tensor_model_parallel_region (g) or, under SP,
//       reduce_scatter_to_sequence_parallel_region; the bias is added once, after.
//   Either linear runs its GEMMs in FP8 when given an Fp8Linear (use_fp8;
//       model/fp8_meta.h): the input cast after the sequence-parallel
//       gather, the bias and the GELU (unfused) in high precision.
//   VocabParallelEmbedding  word [Vp/tp, C] rows of this rank's vocab range
//   VocabParallelCrossEntropy  loss from (N, Vp/tp) logits, never gathered
#pragma once

#include <cstdint>
#include <functional>

#include "backend/ops.h"
#include "comm/communicator.h"
#include "model/fp8_meta.h"
#include "model/param_table.h"
#include "parallel/tp_regions.h"

namespace tripod::model {

// The tensor-parallel group the layers talk to; its rank is the group's.
struct TpContext {
  comm::Communicator* group = nullptr;  // null: tp size 1
  bool sequence_parallel = false;       // only set when the group is active
  int rank() const { return group ? group->rank() : 0; }
  bool active() const { return parallel::tp_active(group); }
};

class ColumnParallelLinear {
 public:
  static constexpr ShardDim kWeightShard = ShardDim::Rows;      // [OC/tp, IC]
  static constexpr ShardDim kBiasShard = ShardDim::Rows;        // [OC/tp]
  static constexpr ShardDim kFusedQkvShard = ShardDim::QkvRows; // [Q_tp | K_tp | V_tp] rows: heads stay whole
  static constexpr ShardDim kGroupedQkvShard = ShardDim::QkvGroups;  // whole query groups, [Q_tp | K_tp | V_tp]
  static constexpr ShardDim kGluShard = ShardDim::GluRows;      // [gate_tp | up_tp]: both halves per rank

  ColumnParallelLinear() = default;
  ColumnParallelLinear(Param* weight, Param* bias, const TpContext& tp) : weight_(weight), bias_(bias), tp_(tp) {}

  // The input every rank multiplies: x (N, IC) itself, or under SP all rows
  // of x (N_sp, IC) gathered into full_buf (N, IC).
  const Tensor& input(const Tensor& x, Tensor& full_buf) const;
  // y (N, OC_tp) = input(x) W^T + b. Returns the input used, which backward
  // takes (the caller may keep it, or call input() again).
  const Tensor& forward(backend::Backend& be, Tensor& y, const Tensor& x, Tensor& full_buf) const;
  // The MLP's fc1 with its activation: pre (N, OC_tp) = input(x) W^T + b,
  // y = gelu(pre), in one matmul where the backend fuses GELU as an epilogue
  // (both are kept: pre for backward_dgelu of the next linear).
  const Tensor& forward_gelu(backend::Backend& be, Tensor& y, Tensor& pre, const Tensor& x,
                             Tensor& full_buf) const;
  // Accumulates dW (and db) from dy (N, OC_tp) and x_full = input(x).
  // Returns d x: (N, IC) all-reduced in place in dfull_buf, or under SP
  // (N_sp, IC) reduce-scattered into dshard_buf.
  const Tensor& backward(backend::Backend& be, const Tensor& dy, const Tensor& x_full, Tensor& dfull_buf,
                         Tensor& dshard_buf) const;
  // backward in two halves, for a caller that has x_full only later (the
  // LayerNorm output, recomputed by the LayerNorm backward that needs d x):
  // backward_input writes d x as backward does (no weight gradient);
  // backward_weight accumulates dW (and db) from dy and x_full = input(x).
  const Tensor& backward_input(backend::Backend& be, const Tensor& dy, Tensor& dfull_buf, Tensor& dshard_buf) const;
  // backward_input for dy = swiglu_backward(fc1, dact) (the MLP's fc1 under
  // FP8 with the SwiGLU cast, Fp8Linear::quantize_grad_swiglu): dy is never
  // formed, so backward_weight's dy then gives only its shape (no bias).
  const Tensor& backward_input_swiglu(const Tensor& fc1, const Tensor& dact, Tensor& dfull_buf,
                                      Tensor& dshard_buf) const;
  bool has_bias() const { return bias_ != nullptr; }
  void backward_weight(backend::Backend& be, const Tensor& dy, const Tensor& x_full) const;
  // The tensor-parallel half of backward alone, for a caller that formed
  // d x_full (N, IC) itself (the loss head, a row chunk at a time): the
  // all-reduce in place, or under SP the reduce-scatter into dshard_buf.
  const Tensor& reduce_input_grad(Tensor& dfull_buf, Tensor& dshard_buf) const;
  Param& weight() const { return *weight_; }
  // FP8 GEMMs through `fp8` (null: the compute dtype's matmuls).
  void use_fp8(Fp8Linear* fp8) { fp8_ = fp8; }
  bool fp8() const { return fp8_ != nullptr; }
  Fp8Linear* fp8_linear() const { return fp8_; }

 private:
  Param* weight_ = nullptr;
  Param* bias_ = nullptr;  // null: no bias (the tied output layer)
  TpContext tp_;
  Fp8Linear* fp8_ = nullptr;
};

class RowParallelLinear {
 public:
  static constexpr ShardDim kWeightShard = ShardDim::Cols;  // [OC, IC/tp]
  static constexpr ShardDim kBiasShard = ShardDim::None;    // [OC] replicated

  RowParallelLinear() = default;
  RowParallelLinear(Param* weight, Param* bias, const TpContext& tp) : weight_(weight), bias_(bias), tp_(tp) {}

  // partial_buf (N, OC) = x (N, IC_tp) W^T, summed over tp in place, or under
  // SP reduce-scattered into shard_buf (N_sp, OC); then + b. Returns the
  // output (partial_buf or shard_buf).
  Tensor& forward(backend::Backend& be, const Tensor& x, Tensor& partial_buf, Tensor& shard_buf) const;
  // forward for x = swiglu(fc1) (fc1 (N, 2 IC_tp)) under FP8 with the
  // SwiGLU cast (Fp8Linear::forward_swiglu): x is never written.
  Tensor& forward_swiglu(backend::Backend& be, const Tensor& fc1, Tensor& partial_buf, Tensor& shard_buf) const;
  // dy (N_sp or N, OC) -> (N, OC) (identity, or all-gathered into full_buf
  // under SP); accumulates dW and db; writes dx (N, IC_tp). The bias
  // gradient uses the full dy, so it is complete on every tp rank.
  void backward(backend::Backend& be, Tensor& dx, const Tensor& dy, const Tensor& x, Tensor& full_buf) const;
  // As backward for x = gelu(pre), with the GELU backward folded in: writes
  // dpre (N, IC_tp) = (dy W) * gelu'(pre) (the MLP's fc2).
  void backward_dgelu(backend::Backend& be, Tensor& dpre, const Tensor& dy, const Tensor& x, const Tensor& pre,
                      Tensor& full_buf) const;
  // FP8 GEMMs through `fp8` (null: the compute dtype's matmuls).
  void use_fp8(Fp8Linear* fp8) { fp8_ = fp8; }
  bool fp8() const { return fp8_ != nullptr; }
  Fp8Linear* fp8_linear() const { return fp8_; }

 private:
  const Tensor& full_output_grad(const Tensor& dy, Tensor& full_buf) const;
  // The GEMM (given the bias, or null when tp splits the sum), then the tp
  // reduction and the bias.
  Tensor& forward_with(backend::Backend& be, const std::function<void(const Tensor*)>& matmul, Tensor& partial_buf,
                       Tensor& shard_buf) const;
  // FP8: dx = dy W, then dW (and db) from dy and x (the input tp splits).
  void fp8_backward(Tensor& dx, const Tensor& dy_full, const Tensor& x) const;

  Param* weight_ = nullptr;
  Param* bias_ = nullptr;
  TpContext tp_;
  Fp8Linear* fp8_ = nullptr;
};

// The word embedding split by vocab rows, fused with the (replicated)
// position embedding as the backend's embedding op is (Megatron's
// LanguageModelEmbedding around a VocabParallelEmbedding). Each rank writes
// its vocab rows' embeddings (zeros for tokens outside its range) and the
// group sums them: reduce_from_tensor_model_parallel_region, or under SP
// reduce_scatter_to_sequence_parallel_region. Positions are added on tp
// rank 0 only, so the sum holds them exactly once.
class VocabParallelEmbedding {
 public:
  static constexpr ShardDim kWeightShard = ShardDim::Rows;  // [Vp/tp, C]

  VocabParallelEmbedding() = default;
  VocabParallelEmbedding(Param* word, Param* position, const TpContext& tp)
      : word_(word), position_(position), tp_(tp) {}
  int64_t vocab_start() const { return tp_.rank() * word_->shape[0]; }

  // out (N_sp or N, C) from tokens (B, T); full_buf (N, C) holds the
  // partial sums when tp is active.
  // position_rows (optional, context parallelism): the position embedding's
  // rows of this rank's local rows t (T, C), in place of the table's rows 0..T-1.
  void forward(backend::Backend& be, Tensor& out, const Tensor& tokens, Tensor& full_buf,
               const Tensor* position_rows = nullptr) const;
  // Accumulates d word and d position from dout (N_sp or N, C). Backward of
  // the sum is the identity (or an all-gather into full_buf under SP):
  // every rank sees the full gradient, so d position is complete everywhere.
  // dposition_rows (optional, with position_rows): d position goes there
  // (+=, by local row) instead of into the table's gradient.
  void backward(backend::Backend& be, const Tensor& dout, const Tensor& tokens, Tensor& full_buf,
                Tensor* dposition_rows = nullptr) const;
  Param* position() const { return position_; }

 private:
  Param* word_ = nullptr;
  Param* position_ = nullptr;
  TpContext tp_;
};

// Cross-entropy over vocab-parallel logits (N, V_tp): the row max
// (all-reduce MAX) and the sums of exp and of the target logit (all-reduce
// SUM) are the only communication; the (N, V) logits are never gathered.
class VocabParallelCrossEntropy {
 public:
  VocabParallelCrossEntropy() = default;
  explicit VocabParallelCrossEntropy(const TpContext& tp) : tp_(tp) {}

  // losses (N) f32; row_max (N) and sums (2, N) are kept for backward.
  void forward(backend::Backend& be, Tensor& losses, const Tensor& logits, const Tensor& targets,
               int64_t vocab_start, Tensor& row_max, Tensor& sums) const;
  // dlogits = dloss * (softmax - onehot(target)); may alias logits.
  void backward(backend::Backend& be, Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                int64_t vocab_start, const Tensor& row_max, const Tensor& sums, float dloss) const;
  // forward, then (when dlogits is given) backward. With the vocab unsplit
  // (tp size 1) one pass over the logits does both (cross_entropy_fused);
  // dlogits may alias logits.
  void forward_backward(backend::Backend& be, Tensor& losses, Tensor* dlogits, const Tensor& logits,
                        const Tensor& targets, int64_t vocab_start, Tensor& row_max, Tensor& sums,
                        float dloss) const;

 private:
  TpContext tp_;
};

}  // namespace tripod::model
