// One pre-LayerNorm transformer layer, forward and backward:
//   res1 = x + dropout(proj(attention(qkv(ln1(x)))))
//   out  = res1 + dropout(fc2(gelu(fc1(ln2(res1)))))
// Megatron: TransformerLayer with SelfAttention and MLP (local spec).
//
// Tensor parallelism (Shoeybi et al. 2019): qkv and fc1 are column-parallel
// (Y_i = X A_i, X replicated: copy_to_tp_region before), proj and fc2 are
// row-parallel (Y = sum_i X_i B_i: reduce_from_tp_region after, then the
// bias). Sequence parallelism (Korthikanti et al. 2022) keeps x, the
// LayerNorms and dropout sharded by rows: all-gather before the
// column-parallel linear, reduce-scatter after the row-parallel one. The
// gathered LayerNorm output is not stored; backward gathers it again, as
// Megatron does, so activation memory scales as the paper's formula.
#include <fmt/format.h>

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
  const int64_t rows_before = tpp_.sp ? stage_.tp_rank * local_rows(mb.B, mb.T) : 0;
  return static_cast<uint64_t>((mb.sample_offset * mb.T + rows_before) * config_.hidden_size);
}

void GptModel::layer_forward(int64_t l, const Tensor& x, LayerActs& a, const MicroBatchActs& mb,
                             uint64_t seed) {
  const int64_t NH_tp = config_.num_attention_heads / stage_.tp_size;
  const float eps = config_.layernorm_epsilon, p = training_ ? config_.hidden_dropout : 0.f;
  const uint64_t counter = dropout_counter(mb);
  Workspace& w = *ws_;

  // ---- attention block ----
  be_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, layer_param(l, "input_layernorm.weight").compute,
                        layer_param(l, "input_layernorm.bias").compute, eps);
  const Tensor& ln1 = tpp_.enter(a.ln1, w.full_a);  // (N, C)
  be_.matmul_forward(a.qkv, ln1, layer_param(l, "self_attention.linear_qkv.weight").compute,
                     &layer_param(l, "self_attention.linear_qkv.bias").compute);
  be_.attention_forward(a.att, a.lse, a.qkv, static_cast<int>(NH_tp));
  be_.matmul_forward(w.full_b, a.att, layer_param(l, "self_attention.linear_proj.weight").compute, nullptr);
  Tensor& attn_out = tpp_.exit(w.full_b, w.tmp);  // (N_sp, C)
  be_.add_bias(attn_out, layer_param(l, "self_attention.linear_proj.bias").compute);
  if (p > 0) be_.dropout_forward(attn_out, attn_out, p, dropout_key(seed, l, 0), counter);
  be_.add(a.res1, x, attn_out);

  // ---- MLP block ----
  be_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res1,
                        layer_param(l, "pre_mlp_layernorm.weight").compute,
                        layer_param(l, "pre_mlp_layernorm.bias").compute, eps);
  const Tensor& ln2 = tpp_.enter(a.ln2, w.full_a);
  be_.matmul_forward(a.fc1, ln2, layer_param(l, "mlp.linear_fc1.weight").compute,
                     &layer_param(l, "mlp.linear_fc1.bias").compute);
  be_.gelu_forward(a.gelu, a.fc1);
  be_.matmul_forward(w.full_b, a.gelu, layer_param(l, "mlp.linear_fc2.weight").compute, nullptr);
  Tensor& mlp_out = tpp_.exit(w.full_b, w.tmp);
  be_.add_bias(mlp_out, layer_param(l, "mlp.linear_fc2.bias").compute);
  if (p > 0) be_.dropout_forward(mlp_out, mlp_out, p, dropout_key(seed, l, 1), counter);
  be_.add(a.out, a.res1, mlp_out);
}

// dres (N_sp,C) holds d loss / d out on entry and d loss / d x on return.
void GptModel::layer_backward(int64_t l, const Tensor& x, LayerActs& a, Tensor& dres,
                              const MicroBatchActs& mb, uint64_t seed) {
  const int64_t NH_tp = config_.num_attention_heads / stage_.tp_size;
  const float p = config_.hidden_dropout;
  const uint64_t counter = dropout_counter(mb);
  Workspace& w = *ws_;

  // ---- MLP block: out = res1 + drop(fc2(gelu(fc1(ln2(res1))))) ----
  const Tensor* dmlp = &dres;
  if (p > 0) {
    be_.dropout_backward(w.tmp, dres, p, dropout_key(seed, l, 1), counter);
    dmlp = &w.tmp;
  }
  // The bias gradient uses the full (gathered) output gradient, so it is
  // complete on every tp rank with or without sequence parallelism.
  const Tensor& dmlp_full = tpp_.exit_backward(*dmlp, w.full_b);  // (N, C)
  Param& fc2 = layer_param(l, "mlp.linear_fc2.weight");
  Param& fc1 = layer_param(l, "mlp.linear_fc1.weight");
  be_.matmul_backward(&w.dgelu, &fc2.grad, &layer_param(l, "mlp.linear_fc2.bias").grad, dmlp_full, a.gelu,
                      fc2.compute);
  be_.gelu_backward(w.dfc1, a.fc1, w.dgelu);
  const Tensor& ln2 = tpp_.enter(a.ln2, w.full_a);  // re-gathered under SP
  be_.matmul_backward(&w.full_b, &fc1.grad, &layer_param(l, "mlp.linear_fc1.bias").grad, w.dfc1, ln2,
                      fc1.compute);
  const Tensor& dln2 = tpp_.enter_backward(w.full_b, w.dln);
  Param& ln2w = layer_param(l, "pre_mlp_layernorm.weight");
  be_.layernorm_backward(dres, ln2w.grad, layer_param(l, "pre_mlp_layernorm.bias").grad, dln2, a.res1,
                         ln2w.compute, a.ln2_mean, a.ln2_rstd);

  // ---- attention block: res1 = x + drop(proj(attn(qkv(ln1(x))))) ----
  const Tensor* datt_out = &dres;
  if (p > 0) {
    be_.dropout_backward(w.tmp, dres, p, dropout_key(seed, l, 0), counter);
    datt_out = &w.tmp;
  }
  const Tensor& datt_full = tpp_.exit_backward(*datt_out, w.full_b);
  Param& proj = layer_param(l, "self_attention.linear_proj.weight");
  Param& qkv = layer_param(l, "self_attention.linear_qkv.weight");
  be_.matmul_backward(&w.datt, &proj.grad, &layer_param(l, "self_attention.linear_proj.bias").grad,
                      datt_full, a.att, proj.compute);
  be_.attention_backward(w.dqkv, w.datt, a.qkv, a.att, a.lse, static_cast<int>(NH_tp));
  const Tensor& ln1 = tpp_.enter(a.ln1, w.full_a);
  be_.matmul_backward(&w.full_b, &qkv.grad, &layer_param(l, "self_attention.linear_qkv.bias").grad, w.dqkv,
                      ln1, qkv.compute);
  const Tensor& dln1 = tpp_.enter_backward(w.full_b, w.dln);
  Param& ln1w = layer_param(l, "input_layernorm.weight");
  be_.layernorm_backward(dres, ln1w.grad, layer_param(l, "input_layernorm.bias").grad, dln1, x,
                         ln1w.compute, a.ln1_mean, a.ln1_rstd);
}

}  // namespace tripod::model
