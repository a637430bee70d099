// One pre-LayerNorm transformer layer (Megatron-core's TransformerLayer:
// input_layernorm -> self_attention -> pre_mlp_layernorm -> mlp, each half
// with its residual add), with explicit forward and backward:
//   res1 = x + dropout(proj(attention(qkv(ln1(x)))))
//   out  = res1 + dropout(fc2(act(fc1(ln2(res1)))))
// A layer owns its parameters (typed handles, model/layer_params.h), its
// tensor-parallel linears (model/tensor_parallel.h) and the recomputation
// its StageConfig asks for; the activations it keeps per micro-batch are a
// LayerActs the caller holds, its scratch the stage's Workspace
// (model/workspace.h). The self-attention half and the MLP half are
// private members, as Megatron's SelfAttention and MLP submodules.
//
// A new kind of layer part goes into the half it replaces: a mixture-of-
// experts MLP is another MLP half (its parameters in LayerParams, its
// activations in LayerActs), attention split across a context-parallel
// group another attention half; the layer's forward and backward call
// whichever the config names.
#pragma once

#include <cstdint>
#include <vector>
#include <memory>

#include "backend/ops.h"
#include "config/gpt_config.h"
#include "model/context_parallel.h"
#include "model/layer_params.h"
#include "model/moe_layer.h"
#include "model/qk_norm.h"
#include "model/stage_config.h"
#include "model/tensor_parallel.h"

namespace tripod::model {
using config::GptConfig;

struct Workspace;

// Shapes: N = B*T; N_sp = N / tp with sequence parallelism, else N. The
// residual stream and LayerNorm outputs are (N_sp, C); everything between a
// column- and a row-parallel linear is (N, *_tp). Activations are in the
// compute dtype, statistics (mean, rstd, lse, losses) in f32. Under
// recompute the tensors that are not kept stay undefined (see Recompute).
struct LayerActs {
  Tensor ln1, ln1_mean, ln1_rstd;  // (N_sp,C), (N_sp), (N_sp); ln1 and ln2 are workspace (NOTE [LayerNorm outputs])
  Tensor qkv;                      // (N, 3*C_tp)
  QkNormActs qk_norm;              // --qk-layernorm: q and k heads before their norm, statistics
  Tensor att, lse;                 // (N, C_tp), (B, NH_tp, T)
  Tensor res1;                     // (N_sp,C) residual after attention
  Tensor ln2, ln2_mean, ln2_rstd;  // (N_sp,C), (N_sp), (N_sp)
  Tensor fc1, gelu;                // (N, F_tp) pre- and post-activation
  Tensor out;                      // (N_sp,C) layer output (residual after MLP)
  // FP8 layers (without full recomputation): the FP8 transposes of the
  // inputs of qkv, proj, fc1, fc2 as cast in forward, for the weight
  // gradients (model/fp8_meta.h, Fp8Linear::keep_input).
  Fp8Linear::KeptInput fp8_in[4];
  // --fp8-dot-product-attention (model/fp8_meta.h Fp8Attention): the FP8
  // attention's inputs for its backward, qkv8 (B, T, QKV_tp) and att8 (B,
  // T, C_tp) E4M3; stored without recomputation, else the workspace's.
  Tensor fp8_qkv, fp8_att;
  // An MoE layer's MLP state (fc1 and gelu stay undefined there); shared
  // by the copies the workspace hands out (Workspace::layer_acts).
  std::shared_ptr<MoeActs> moe;
  size_t bytes() const;            // activation bytes held
};

// The hidden dropout of one pass over a micro-batch: its probability (0:
// none, e.g. a forward without grad), the step's seed, and the global
// element index of this rank's first residual element (the same mask at
// every layout).
// Under context parallelism this rank's residual rows are not one run of
// the global elements (model/context_parallel.h): `runs` then lists the
// contiguous runs, rows [row, row + rows) at global element `counter`.
struct DropoutRun {
  int64_t row = 0, rows = 0;
  uint64_t counter = 0;
};
struct LayerDropout {
  float p = 0.f;
  uint64_t seed = 0;
  uint64_t counter = 0;
  std::vector<DropoutRun> runs;  // empty: one run from `counter`
};

// dropout_forward (or _backward) of x (rows, C) into out with d's runs and key.
void apply_dropout(backend::Backend& be, Tensor& out, const Tensor& x, const LayerDropout& d, uint64_t key,
                   bool backward);

class TransformerLayer {
 public:
  // layer_number: the global index of the layer (0-based; it keys the
  // dropout streams). config and stage must outlive the layer (the model
  // that holds it owns both). fp8: the stage's FP8 state, from which the
  // four linears take their FP8 GEMMs when layer_spec(layer_number).fp8,
  // and the attention core its FP8 attention when .fp8_attention (null: no
  // FP8 in this stage).
  TransformerLayer(const GptConfig& config, const StageConfig& stage, int64_t layer_number,
                   const LayerParams& params, const TpContext& tp, backend::Backend& be, Fp8State* fp8 = nullptr);

  int64_t layer_number() const { return layer_number_; }
  // Whether the four linears run their GEMMs in FP8 (LayerSpec::fp8).
  bool fp8() const { return linear_qkv_.fp8(); }
  // The attention core in FP8 (LayerSpec::fp8_attention; null: the compute dtype).
  const Fp8Attention* fp8_attention() const { return fp8_attention_; }
  // The MoE MLP half (null for a dense layer).
  const MoeLayer* moe() const { return moe_.get(); }
  const LayerParams& params() const { return params_; }

  // The activations this layer keeps for one micro-batch of (B, T): all of
  // LayerActs but the LayerNorm outputs, less what StageConfig::recompute
  // recomputes.
  LayerActs make_acts(int64_t B, int64_t T) const;

  // x (N_sp, C) -> a.out. `a` holds the buffers to write (the stored ones
  // and the workspace's, Workspace::layer_acts).
  void forward(const Tensor& x, LayerActs& a, Workspace& ws, const LayerDropout& d) const;
  // Before backward under recomputation: what the first forward did not
  // keep, computed again from x and what it kept (full: the whole forward;
  // selective: the attention core). No-op without recomputation.
  void recompute(const Tensor& x, LayerActs& a, Workspace& ws, const LayerDropout& d) const;
  // dres (N_sp, C) holds d loss / d out on entry and d loss / d x on
  // return; accumulates the parameter gradients.
  void backward(const Tensor& x, LayerActs& a, Tensor& dres, Workspace& ws, const LayerDropout& d) const;

 private:
  // The halves. The attention half's forward
  // returns proj's output (N_sp, C) after dropout, before the residual add;
  // the MLP half's forward writes a.out. Their backward passes take d out
  // (d res1) in dres and leave the norm's d input in it.
  Tensor& attention_forward(const Tensor& x, LayerActs& a, Workspace& ws, const LayerDropout& d) const;
  // qkv_local: a.qkv holds the local rows (false: recompute, where
  // --cp-comm-type a2a left it in the head split, NOTE [Head all-to-all]).
  void attention_core_forward(LayerActs& a, Workspace& ws, bool qkv_local) const;
  void attention_backward(const Tensor& x, LayerActs& a, Tensor& dres, Workspace& ws, const LayerDropout& d) const;
  void mlp_forward(const Tensor& x, const Tensor& attn_out, LayerActs& a, Workspace& ws,
                   const LayerDropout& d) const;
  void mlp_backward(LayerActs& a, Tensor& dres, Workspace& ws, const LayerDropout& d) const;
  // The LayerNorm (or RMSNorm) backward into dres, writing the norm's output
  // ln again when given (NOTE [LayerNorm outputs]; an FP8 linear that kept
  // its input's transpose needs none).
  void norm_backward(Tensor& dres, Param* weight, Param* bias, const Tensor& dln, const Tensor& inp,
                     const Tensor& mean, Tensor& rstd, Tensor* ln) const;
  // Points the FP8 linears at this micro-batch's kept input transposes.
  void bind_fp8(const LayerActs& a) const;
  // Whether the norm's backward may leave its output as it is for linear's
  // weight gradient (transformer_layer.cpp).
  bool keeps_norm_output(const ColumnParallelLinear& linear) const;
  // The column-parallel input's gathered (N, C) tensor for backward_weight:
  // the norm output re-gathered, or when the FP8 linear kept its
  // transpose, a buffer of that shape (the values are not read).
  const Tensor& wgrad_input(const ColumnParallelLinear& linear, Tensor& ln, Workspace& ws) const;
  // Whether the MLP casts SwiGLU's output and d fc1 inside the SwiGLU kernel (NOTE [FP8 SwiGLU cast]).
  bool fp8_swiglu_cast() const;
  uint64_t dropout_key(uint64_t seed, int site) const;

  const GptConfig* config_;
  const StageConfig* stage_;
  int64_t layer_number_;
  LayerParams params_;
  backend::Backend* be_;
  int num_heads_tp_;   // NH / tp
  int kv_groups_tp_;   // G / tp under grouped-query attention; 0 (= NH_tp) otherwise
  config::CpCommType cp_comm_;  // this layer's --cp-comm-type (cp > 1)
  const Tensor* rope_positions(const Workspace& ws) const;
  QkNormWeights qk_norm_;  // --qk-layernorm's weights (null without)
  ColumnParallelLinear linear_qkv_;
  RowParallelLinear linear_proj_;
  ColumnParallelLinear linear_fc1_;
  RowParallelLinear linear_fc2_;
  std::unique_ptr<MoeLayer> moe_;  // an MoE layer's MLP half (LayerSpec::moe())
  Fp8Attention* fp8_attention_ = nullptr;  // owned by the stage's Fp8State
};

}  // namespace tripod::model
