// FP8 scaling state and the FP8 GEMMs of one linear layer (Transformer
// Engine's FP8 tensor meta, DelayedScaling and per-tensor current scaling;
// config/fp8_config.h holds the options, docs/fp8.md is the guide).
//
// Every FP8 GEMM operand (a linear's input x, weight W, output gradient dy)
// has an Fp8TensorMeta: f32 scale, scale_inv and amax on the device (and
// for delayed scaling an amax history of --fp8-amax-history-len). A value v
// is stored as fp8(v * scale); the GEMM multiplies by scale_inv.
//   tensorwise  before each cast: amax of the tensor itself (a first cast
//               pass, its values discarded), the max over the tp group
//               when tp splits the tensor, then scale = fp8_max / amax /
//               2^margin (fp8_update_scale), then the cast.
//   delayed     each cast uses the scale as it stands and accumulates the
//               tensor's amax; once per iteration (end_iteration) the amaxes
//               are reduced (max) over the tp group and then the dp group,
//               each history rolls in its amax and scale = fp8_max /
//               algo(history) / 2^margin.
//   blockwise   no meta: each cast computes a power-of-two scale per 1x128
//               block of x and dy (rows for the GEMM operand, columns for
//               the wgrad transpose) and per 128x128 tile of W
//               (backend/ops.h fp8_block_cast). A block never spans tp or
//               cp ranks when the split widths are multiples of 128, so
//               there is nothing to reduce: every layout quantizes alike.
// Why these groups: a tp rank holds a shard of W (column-parallel rows,
// row-parallel columns), of a row-parallel input (N, IC_tp) and of a
// column-parallel dy (N, OC_tp); the max over tp is the amax of the whole
// tensor, so every layout quantizes the same values. dp replicas see other
// micro-batches: the max over dp keeps their delayed scales equal (and
// equal to one process running all the micro-batches), which Megatron
// does with its amax reduction group (tp x dp). Current scaling reduces
// over tp only: each micro-batch's tensor is scaled by its own amax.
//
// The weight is cast (with its transpose, for dgrad) once per optimizer
// step and cached in the linear until end_iteration or
// invalidate_weights(). The input's transpose (the wgrad operand) comes
// from the forward's cast when the caller keeps it per micro-batch
// (keep_input: one cast-transpose pass in forward, none in backward);
// otherwise backward casts the saved high-precision input again with the
// same scale (the same codes).
//
// With --fp8-dot-product-attention an Fp8Attention per FP8 layer runs the
// attention core on FP8 operands; its six metas join the same two groups.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/ops.h"
#include "comm/communicator.h"
#include "config/fp8_config.h"
#include "model/param_table.h"

namespace tripod::model {

// One FP8 GEMM operand's scaling state: views of one element (one row of
// the history) of Fp8State's tensors.
struct Fp8TensorMeta {
  Tensor scale, scale_inv, amax;  // (1) f32 on the device
  Tensor amax_history;            // (1, H) f32; delayed scaling only
  DType dtype = DType::E4M3;      // E4M3, or E5M2 for hybrid gradients
};

class Fp8State;

// The FP8 GEMMs of one linear y = x W^T (+ b): forward, dgrad and wgrad
// (backend/ops.h fp8_matmul), owning its three metas and the cached FP8
// weight. `x_split` / `dy_split`: tp splits that tensor across the group
// (its amax is reduced over tp).
class Fp8Linear {
 public:
  Fp8Linear(Fp8State& state, int index, const Param& weight);

  // The kept input of the current micro-batch (keep_input): x's FP8
  // transpose (IC, N) and the inverse scale it was cast with (one f32,
  // 16-byte aligned; under tensorwise scaling another micro-batch's forward
  // may change the linear's scale before this one's backward; under
  // blockwise scaling the transpose's block scales, kept_scale_numel).
  struct KeptInput {
    Tensor x_t, scale_inv;
  };
  // Where forward writes (and wgrad reads) the input's FP8 transpose from
  // now on (the caller binds each micro-batch's before its passes); an
  // undefined x_t (or KeptInput{}): wgrad casts x again.
  void keep_input(KeptInput kept) { kept_ = std::move(kept); }
  bool keeps_input() const { return kept_.x_t.defined(); }
  // KeptInput::scale_inv's f32 elements for an input of `rows` rows and
  // `width` columns: 1, or ceil(rows/128) * width under blockwise scaling.
  int64_t kept_scale_numel(int64_t rows, int64_t width) const;

  // y (N, OC) = x (N, IC) W^T (+ bias, of y's dtype; null: none); with
  // fast accumulation into a bf16/f16 y, as Transformer Engine's forward GEMM.
  void forward(Tensor& y, const Tensor& x, bool x_split, const Tensor* bias);
  // forward for x = swiglu(fc1) (fc1 (N, 2 IC) = [gate | up]), cast inside
  // the SwiGLU kernel (fp8_swiglu_cast_transpose, or fp8_swiglu_block_cast
  // under blockwise scaling): x itself is never written. Delayed or
  // blockwise scaling and a kept input only (fuses_swiglu()).
  void forward_swiglu(Tensor& y, const Tensor& fc1, const Tensor* bias);
  // Casts dy (N, OC) and its transpose in the gradient format (kept for
  // wgrad until another linear's backward casts its dy).
  void quantize_grad(const Tensor& dy, bool dy_split);
  // quantize_grad for dy = swiglu_backward(fc1, dact), computed inside the
  // cast (fp8_swiglu_backward_cast_transpose or fp8_swiglu_backward_block_cast):
  // dy itself is never written (so this linear must have no bias). Delayed
  // or blockwise scaling.
  void quantize_grad_swiglu(const Tensor& fc1, const Tensor& dact);
  // Whether the SwiGLU casts apply: delayed scaling (the scale is known
  // before the tensor) or blockwise (each block's scale from the block),
  // unless TRIPOD_FP8_UNFUSED_SWIGLU=1.
  bool fuses_swiglu() const;
  // False under --no-fp8-wgrad: wgrad runs in the compute dtype on the
  // unquantized x and dy (so no input transpose is kept, none of dy cast).
  bool fp8_wgrad() const;
  // dx (N, IC) = dy W from the last quantize_grad of this linear.
  void dgrad(Tensor& dx);
  // dW (OC, IC) += dy^T x, x's transpose kept from forward (keep_input) or
  // cast again with its forward scale; then dbias += column sums of dy in
  // high precision (when given). With a kept input x gives only its shape.
  void wgrad(Tensor& dweight, Tensor* dbias, const Tensor& dy, const Tensor& x, bool x_split);
  void invalidate_weight() { weight_valid_ = false; }
  // --fp8-param-gather (distributed/fp8_param_gather.h): the weight's FP8
  // codes come gathered, cast from the fp32 master with the weight meta's
  // scale; the GEMMs read them in place and the dgrad transpose is made
  // from them (codes -> f32 -> the same codes, transposed: exact, as a
  // code times scale_inv times scale rounds back to itself).
  void use_gathered_weight(Tensor codes);
  const Param& weight() const { return *weight_; }
  Fp8TensorMeta& weight_meta() { return w_; }
  int index() const { return index_; }
  const std::string& name() const { return name_; }  // the weight's name less ".weight"

 private:
  void ensure_weight();
  // The kept input transpose as (C, R), checked against the input (R, C).
  Tensor kept_transpose(int64_t R, int64_t C) const;
  bool blockwise() const;
  // Blockwise: the kept transpose's block scales, checked against the input (R, C).
  Tensor kept_block_scales(int64_t R, int64_t C) const;

  Fp8State* state_;
  int index_;
  const Param* weight_;
  std::string name_;
  Fp8TensorMeta x_, w_, dy_;
  Tensor w8_, w8_t_;  // (OC, IC), (IC, OC) E4M3: the cached FP8 weight
  Tensor ws_, ws_t_;  // blockwise: their 128x128 tile scale_inv (backend/ops.h layouts)
  bool gathered_ = false;  // w8_ is a view of the gathered codes
  bool weight_valid_ = false;
  KeptInput kept_;
};

// The FP8 dot product attention of one layer (--fp8-dot-product-attention;
// Transformer Engine's fp8_dpa without fp8_mha): the attention core on FP8
// Q, K, V with the compute dtype in and out, through backend/ops.h's
// attention_fp8_forward/backward. It owns six metas: qkv, s (the softmax
// P) and o (the output) in the forward group (E4M3), dout, dp (the scores'
// gradient dS) and dqkv in the gradient group (E5M2 under hybrid), so
// end_iteration reduces and updates them with the linears'. A tp rank
// holds a shard of the heads: the max over tp is the whole tensor's amax,
// and every layout scales alike. Delayed scaling only: the kernel
// quantizes P, O, dP and dQKV itself, with scales it must have before it
// runs.
class Fp8Attention {
 public:
  enum Slot { kQkv, kS, kO, kDout, kDp, kDqkv, kSlots };
  static const char* slot_name(int slot);  // "qkv", "s", "o", "dout", "dp", "dqkv"

  Fp8Attention(Fp8State& state, int index, std::string name);

  // att (B, T, NH_tp HS) and lse from qkv (B, T, W_tp), both in the compute
  // dtype (qkv after RoPE and the q/k norms): qkv8 = E4M3(qkv), the FP8
  // attention into att8 (E4M3, att's shape), att = att8 dequantized. qkv8
  // and att8 are the backward's inputs (the caller keeps them per
  // micro-batch, or recomputes them: the same codes within an iteration).
  void forward(Tensor& att, Tensor& lse, Tensor& qkv8, Tensor& att8, const Tensor& qkv, int n_head,
               int n_kv_head) const;
  // dqkv (B, T, W_tp) from datt (att's shape), compute dtype: datt cast to
  // the gradient format, the FP8 backward into dQKV codes, dequantized.
  void backward(Tensor& dqkv, const Tensor& datt, const Tensor& qkv8, const Tensor& att8, const Tensor& lse,
                int n_head, int n_kv_head) const;

  // The backend's view of the six metas' scales and amaxes (built once).
  const backend::Fp8AttentionMeta& op_meta() const { return op_; }
  const Fp8TensorMeta& meta(int slot) const { return m_[slot]; }
  int index() const { return index_; }
  const std::string& name() const { return name_; }  // "<layer>.self_attention.core_attention"

 private:
  Fp8State* state_;
  int index_;
  std::string name_;
  Fp8TensorMeta m_[kSlots];
  backend::Fp8AttentionMeta op_;
  backend::Fp8AttentionMeta make_op_meta() const;
};

// The FP8 state of one pipeline stage (model chunk): the metas of its FP8
// linears (and FP8 attentions) in two groups (forward operands x, W, and
// the attention's qkv, s, o: E4M3; gradients dy, and the attention's dout,
// dp, dqkv: E5M2 under hybrid), the cast scratch and the per-iteration
// calls.
class Fp8State {
 public:
  // num_linears: FP8 linears of this stage (4 per FP8 layer); tp: the
  // group that splits their tensors (null: tp size 1); cp: the
  // context-parallel group, which splits every activation and gradient
  // along the sequence but not the weights (null: cp size 1);
  // num_attentions: FP8 attentions (--fp8-dot-product-attention: 1 per FP8
  // layer; delayed scaling only).
  Fp8State(const config::Fp8Config& config, int num_linears, backend::Backend& be, comm::Communicator* tp,
           comm::Communicator* cp = nullptr, int num_attentions = 0);

  // The next linear's FP8 GEMMs (call num_linears times; the state owns them).
  Fp8Linear* add_linear(const Param& weight);
  int num_linears() const { return static_cast<int>(linears_.size()); }
  Fp8Linear& linear(int i) { return *linears_[static_cast<size_t>(i)]; }
  // The next FP8 attention (call num_attentions times), named for its
  // checkpoint tensors.
  Fp8Attention* add_attention(std::string name);
  int num_attentions() const { return static_cast<int>(attentions_.size()); }
  Fp8Attention& attention(int i) { return *attentions_[static_cast<size_t>(i)]; }
  const config::Fp8Config& config() const { return config_; }
  backend::Backend& backend() { return *be_; }

  // Start of a training iteration: amaxes to zero (delayed) and the weights
  // cast again at their next use (so the weight amaxes count this iteration).
  void begin_iteration();
  // End of a training iteration (after the optimizer step): delayed
  // scaling's amax reduction over tp then dp, history roll and scale
  // update; the cached weights are stale.
  void end_iteration(comm::Communicator* dp);
  // The weights changed outside a step (a checkpoint load).
  void invalidate_weights();

  // Delayed scaling's state for checkpoints: per FP8 linear and operand,
  // (name, a view on the device): "<linear>.{input,weight,grad}.{scale,
  // scale_inv,amax_history}" with <linear> the weight's name less
  // ".weight"; then per FP8 attention "<attention>.{qkv,s,o,dout,dp,dqkv}.
  // {scale,scale_inv,amax_history}" (global names: any layout loads them).
  // Loading writes into the views.
  std::vector<std::pair<std::string, Tensor>> state_tensors();

  // Used by Fp8Linear: the meta of operand `slot` (0 x, 1 W, 2 dy) of linear i.
  Fp8TensorMeta meta(int linear, int slot);
  // Used by Fp8Attention: the meta of tensor `slot` (Fp8Attention::Slot) of attention i.
  Fp8TensorMeta attention_meta(int attention, int slot);
  // Casts `in` (R, C) into out (and out_t when given) with m's scale, per
  // the recipe (tensorwise: the scale from this tensor's amax first,
  // reduced over tp when `split`, and over cp for an `activation`: x or dy,
  // not a weight).
  void quantize(Fp8TensorMeta& m, Tensor& out, Tensor* out_t, const Tensor& in, bool split, bool activation = true);
  // Scratch views for the casts of x (slot 0) and dy (slot 1): the FP8
  // tensor (R, C) and its transpose (C, R).
  Tensor scratch(int slot, bool transposed, int64_t R, int64_t C);
  // Blockwise: the f32 block scale_inv of scratch(slot, transposed, R, C)
  // (ceil(C/128) * R, or ceil(R/128) * C transposed).
  Tensor block_scale_scratch(int slot, bool transposed, int64_t R, int64_t C);
  const Fp8Linear* grad_owner = nullptr;  // whose dy the scratch holds
  // The FP8 attention backward's codes in the gradient format, shared by
  // the layers: slot 0 dout, 1 dqkv, n elements.
  Tensor attention_scratch(int slot, int64_t n);

 private:
  // The metas of one dtype: tensor m at element kMetaStride * m (16-byte
  // aligned scales), the M tensors updated and reduced at once.
  static constexpr int64_t kMetaStride = 4;
  struct Group {
    DType dtype;
    float fp8_max;
    Tensor scale, scale_inv, amax, history;  // (S M), (S M), (S M), (S M, H) with S = kMetaStride
  };
  void make_group(Group& g, DType dtype, int64_t m);
  Fp8TensorMeta group_meta(Group& g, int64_t t) const;  // tensor t of g (views)

  config::Fp8Config config_;
  backend::Backend* be_;
  comm::Communicator* tp_;
  comm::Communicator* cp_;
  int num_linears_, num_attentions_;
  // fwd: x and W of linear i at tensors 2i, 2i+1, then qkv, s, o of
  // attention a at 2 L + 3a + {0, 1, 2}; bwd: dy of linear i at tensor i,
  // then dout, dp, dqkv of attention a at L + 3a + {0, 1, 2} (L = num_linears).
  Group fwd_, bwd_;
  std::vector<std::unique_ptr<Fp8Linear>> linears_;
  std::vector<std::unique_ptr<Fp8Attention>> attentions_;
  Tensor scratch_[2][2];  // [x | dy][plain | transposed], grown as needed
  Tensor block_scale_scratch_[2][2];  // blockwise: their scale_inv, grown as needed
  Tensor attention_scratch_[2];  // [dout | dqkv], grown as needed
};

}  // namespace tripod::model
