// One pre-LayerNorm transformer layer, forward and backward:
//   res1 = x + dropout(proj(attention(qkv(ln1(x)))))
//   out  = res1 + dropout(fc2(gelu(fc1(ln2(res1)))))
// Megatron: TransformerLayer with SelfAttention and MLP (local spec).
// The Llama-family options (config/gpt_config.h) change pieces in place:
// RMSNorm for the LayerNorms, RoPE on q and k after qkv (so the stored qkv
// is rotated; backward rotates dqkv back before qkv's backward), grouped
// K/V heads in attention, silu(gate) * up for gelu(fc1) with fc1 = [gate |
// up], and null biases.
//
// Tensor parallelism (Shoeybi et al. 2019): qkv and fc1 are
// ColumnParallelLinear (Y_i = X A_i, X replicated:
// copy_to_tensor_model_parallel_region before), proj and fc2 are
// RowParallelLinear (Y = sum_i X_i B_i: reduce_from_tensor_model_parallel_region
// after, then the bias); model/tensor_parallel.h. Sequence parallelism
// (Korthikanti et al. 2022) keeps x, the LayerNorms and dropout sharded by
// rows: all-gather before the column-parallel linear, reduce-scatter after
// the row-parallel one. The gathered LayerNorm output is not stored;
// backward gathers it again, as Megatron does, so activation memory scales
// as the paper's formula.
//
// NOTE [LayerNorm outputs]
// No LayerNorm output is kept per layer either: forward writes ln1 and ln2
// into one workspace buffer that the next linear consumes at once, and
// backward gets each back from the LayerNorm backward that needs d ln
// anyway (layernorm_backward's out: one more write in a pass that reads the
// input already), before the linear's weight gradient. 2 (N_sp, C) tensors
// per layer fewer: 4.7 GiB at GPT-2 1.5B, micro-batch 16. Parameters come from the LayerParams resolved at
// construction (model/layer_params.h): no lookups here.

#include "backend/philox.h"
#include "model/gpt_model.h"
#include "model/workspace.h"

namespace tripod::model {
namespace {
// Dropout stream of (layer, site): site 0 after attention, 1 after the MLP.
uint64_t dropout_key(uint64_t seed, int64_t layer, int site) {
  return backend::mix64(seed, static_cast<uint64_t>(layer) * 2 + static_cast<uint64_t>(site) + 1);
}
}  // namespace

// Global element index of this rank's first residual element: the same
// dropout mask at every layout.
uint64_t GptModel::dropout_counter(const MicroBatchActs& mb) const {
  const int64_t rows_before = tp_.sequence_parallel ? stage_.tp_rank * local_rows(mb.B, mb.T) : 0;
  return static_cast<uint64_t>((mb.sample_offset * mb.T + rows_before) * config_.hidden_size);
}

void GptModel::layer_forward(int64_t l, const Tensor& x, LayerActs& a, const MicroBatchActs& mb,
                             uint64_t seed) {
  const int NH_tp = static_cast<int>(config_.num_attention_heads / stage_.tp_size);
  // K/V heads: 0 (= NH_tp) unless grouped, as the GPT-2 path always called the op.
  const int G_tp = config_.group_query_attention ? static_cast<int>(config_.query_groups() / stage_.tp_size) : 0;
  const float eps = config_.layernorm_epsilon, p = training_ ? config_.hidden_dropout : 0.f;
  const uint64_t counter = dropout_counter(mb);
  const size_t li = static_cast<size_t>(l - stage_.first_layer);
  const LayerParams& P = sp_.layers[li];
  const LayerLinears& M = linears_[li];
  Workspace& w = *ws_;
  const bool rms = config_.rmsnorm();

  // ---- attention block ----
  if (rms)
    be_.rmsnorm_forward(a.ln1, a.ln1_rstd, x, P.input_layernorm_weight->compute, eps);
  else
    be_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, P.input_layernorm_weight->compute,
                          P.input_layernorm_bias->compute, eps);
  M.linear_qkv.forward(be_, a.qkv, a.ln1, w.full_a);  // ln1 gathered to (N, C) under SP
  if (config_.rope()) be_.rope_forward(a.qkv, NH_tp, G_tp, config_.rotary_dim(), config_.rotary_base);
  be_.attention_forward(a.att, a.lse, a.qkv, NH_tp, G_tp);
  Tensor& attn_out = M.linear_proj.forward(be_, a.att, w.full_b, w.tmp);  // (N_sp, C)
  if (p > 0) be_.dropout_forward(attn_out, attn_out, p, dropout_key(seed, l, 0), counter);

  // ---- MLP block (the residual add and its norm in one pass) ----
  if (rms)
    be_.fused_residual_rmsnorm_forward(a.res1, a.ln2, a.ln2_rstd, x, attn_out, P.pre_mlp_layernorm_weight->compute,
                                       eps);
  else
    be_.fused_residual_layernorm_forward(a.res1, a.ln2, a.ln2_mean, a.ln2_rstd, x, attn_out,
                                         P.pre_mlp_layernorm_weight->compute, P.pre_mlp_layernorm_bias->compute,
                                         eps);
  if (config_.swiglu) {
    M.linear_fc1.forward(be_, a.fc1, a.ln2, w.full_a);  // [gate | up]
    be_.swiglu_forward(a.gelu, a.fc1);
  } else {
    M.linear_fc1.forward_gelu(be_, a.gelu, a.fc1, a.ln2, w.full_a);  // fc1 keeps the pre-GELU values
  }
  Tensor& mlp_out = M.linear_fc2.forward(be_, a.gelu, w.full_b, w.tmp);
  if (p > 0) be_.dropout_forward(mlp_out, mlp_out, p, dropout_key(seed, l, 1), counter);
  be_.add(a.out, a.res1, mlp_out);
}

// dres (N_sp,C) holds d loss / d out on entry and d loss / d x on return.
void GptModel::layer_backward(int64_t l, const Tensor& x, LayerActs& a, Tensor& dres,
                              const MicroBatchActs& mb, uint64_t seed) {
  const int NH_tp = static_cast<int>(config_.num_attention_heads / stage_.tp_size);
  // K/V heads: 0 (= NH_tp) unless grouped, as the GPT-2 path always called the op.
  const int G_tp = config_.group_query_attention ? static_cast<int>(config_.query_groups() / stage_.tp_size) : 0;
  const float p = config_.hidden_dropout, eps = config_.layernorm_epsilon;
  const uint64_t counter = dropout_counter(mb);
  const size_t li = static_cast<size_t>(l - stage_.first_layer);
  const LayerParams& P = sp_.layers[li];
  const LayerLinears& M = linears_[li];
  Workspace& w = *ws_;
  const bool rms = config_.rmsnorm();
  // NOTE [LayerNorm outputs]: the norm's backward gives d input and writes
  // the norm's output again for the next linear's weight gradient (the
  // RMSNorm backward has no such output: its forward runs again, the same
  // values bit for bit).
  auto norm_backward = [&](Param* weight, Param* bias, const Tensor& dln, const Tensor& inp, const Tensor& mean,
                           Tensor& rstd, Tensor& ln) {
    if (rms) {
      be_.rmsnorm_backward(dres, weight->grad, dln, inp, weight->compute, rstd);
      be_.rmsnorm_forward(ln, rstd, inp, weight->compute, eps);
    } else {
      be_.layernorm_backward(dres, weight->grad, bias->grad, dln, inp, weight->compute, mean, rstd, &ln,
                             &bias->compute);
    }
  };

  // ---- MLP block: out = res1 + drop(fc2(act(fc1(ln2(res1))))) ----
  const Tensor* dmlp = &dres;
  if (p > 0) {
    be_.dropout_backward(w.tmp, dres, p, dropout_key(seed, l, 1), counter);
    dmlp = &w.tmp;
  }
  if (config_.swiglu) {
    M.linear_fc2.backward(be_, w.dact, *dmlp, a.gelu, w.full_b);
    be_.swiglu_backward(w.dfc1, a.fc1, w.dact);
  } else {
    M.linear_fc2.backward_dgelu(be_, w.dfc1, *dmlp, a.gelu, a.fc1, w.full_b);  // GELU backward folded in
  }
  const Tensor& dln2 = M.linear_fc1.backward_input(be_, w.dfc1, w.full_b, w.dln);
  norm_backward(P.pre_mlp_layernorm_weight, P.pre_mlp_layernorm_bias, dln2, a.res1, a.ln2_mean, a.ln2_rstd, a.ln2);
  M.linear_fc1.backward_weight(be_, w.dfc1, M.linear_fc1.input(a.ln2, w.full_a));  // re-gathered under SP

  // ---- attention block: res1 = x + drop(proj(attn(rope(qkv(ln1(x)))))) ----
  const Tensor* datt_out = &dres;
  if (p > 0) {
    be_.dropout_backward(w.tmp, dres, p, dropout_key(seed, l, 0), counter);
    datt_out = &w.tmp;
  }
  M.linear_proj.backward(be_, w.datt, *datt_out, a.att, w.full_b);
  be_.attention_backward(w.dqkv, w.datt, a.qkv, a.att, a.lse, NH_tp, G_tp);
  if (config_.rope()) be_.rope_backward(w.dqkv, NH_tp, G_tp, config_.rotary_dim(), config_.rotary_base);
  const Tensor& dln1 = M.linear_qkv.backward_input(be_, w.dqkv, w.full_b, w.dln);
  norm_backward(P.input_layernorm_weight, P.input_layernorm_bias, dln1, x, a.ln1_mean, a.ln1_rstd, a.ln1);
  M.linear_qkv.backward_weight(be_, w.dqkv, M.linear_qkv.input(a.ln1, w.full_a));
}

}  // namespace tripod::model
