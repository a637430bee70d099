// One pre-LayerNorm transformer layer, forward and backward:
//   res1 = x + dropout(proj(attention(qkv(ln1(x)))))
//   out  = res1 + dropout(fc2(gelu(fc1(ln2(res1)))))
// Megatron: TransformerLayer with SelfAttention and MLP (local spec).
// Tensor parallelism (Megatron, Shoeybi et al. 2019): qkv and fc1 are
// column-parallel (Y_i = X A_i), proj and fc2 row-parallel (Y = sum_i X_i B_i,
// bias added after the reduction).
#include <fmt/format.h>

#include "model/gpt_model.h"
#include "backend/philox.h"
#include "model/workspace.h"

namespace tripod::model {
namespace {
// Dropout stream of (layer, site): site 0 after attention, 1 after the MLP.
uint64_t dropout_key(uint64_t seed, int64_t layer, int site) {
  return backend::mix64(seed, static_cast<uint64_t>(layer) * 2 + static_cast<uint64_t>(site) + 1);
}
}  // namespace

void GptModel::layer_forward(int64_t l, const Tensor& x, LayerActs& a, const MicroBatchActs& mb,
                             uint64_t seed) {
  const int64_t NH_tp = config_.num_attention_heads / stage_.tp_size;
  const float eps = config_.layernorm_epsilon, p = config_.hidden_dropout;
  const uint64_t counter = static_cast<uint64_t>(mb.sample_offset * mb.T * config_.hidden_size);
  Tensor& tmp = ws_->tmp;  // (N,C)

  // ---- attention block ----
  be_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, layer_param(l, "input_layernorm.weight").value,
                        layer_param(l, "input_layernorm.bias").value, eps);
  be_.matmul_forward(a.qkv, a.ln1, layer_param(l, "self_attention.linear_qkv.weight").value,
                     &layer_param(l, "self_attention.linear_qkv.bias").value);
  be_.attention_forward(a.att, a.lse, a.qkv, static_cast<int>(NH_tp));
  be_.matmul_forward(tmp, a.att, layer_param(l, "self_attention.linear_proj.weight").value, nullptr);
  // TODO(tp): reduce_from_tp_region(tmp) before the bias.
  be_.add_bias(tmp, layer_param(l, "self_attention.linear_proj.bias").value);
  if (p > 0) be_.dropout_forward(tmp, tmp, p, dropout_key(seed, l, 0), counter);
  be_.add(a.res1, x, tmp);

  // ---- MLP block ----
  be_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res1,
                        layer_param(l, "pre_mlp_layernorm.weight").value,
                        layer_param(l, "pre_mlp_layernorm.bias").value, eps);
  be_.matmul_forward(a.fc1, a.ln2, layer_param(l, "mlp.linear_fc1.weight").value,
                     &layer_param(l, "mlp.linear_fc1.bias").value);
  be_.gelu_forward(a.gelu, a.fc1);
  be_.matmul_forward(tmp, a.gelu, layer_param(l, "mlp.linear_fc2.weight").value, nullptr);
  // TODO(tp): reduce_from_tp_region(tmp) before the bias.
  be_.add_bias(tmp, layer_param(l, "mlp.linear_fc2.bias").value);
  if (p > 0) be_.dropout_forward(tmp, tmp, p, dropout_key(seed, l, 1), counter);
  be_.add(a.out, a.res1, tmp);
}

// dres (N,C) holds d loss / d out on entry and d loss / d x on return.
void GptModel::layer_backward(int64_t l, const Tensor& x, LayerActs& a, Tensor& dres,
                              const MicroBatchActs& mb, uint64_t seed) {
  const int64_t NH_tp = config_.num_attention_heads / stage_.tp_size;
  const float p = config_.hidden_dropout;
  const uint64_t counter = static_cast<uint64_t>(mb.sample_offset * mb.T * config_.hidden_size);
  Workspace& w = *ws_;

  // ---- MLP block: out = res1 + drop(fc2(gelu(fc1(ln2(res1))))) ----
  const Tensor* dmlp = &dres;
  if (p > 0) {
    be_.dropout_backward(w.tmp, dres, p, dropout_key(seed, l, 1), counter);
    dmlp = &w.tmp;
  }
  Param& fc2 = layer_param(l, "mlp.linear_fc2.weight");
  Param& fc1 = layer_param(l, "mlp.linear_fc1.weight");
  be_.matmul_backward(&w.dgelu, &fc2.grad, &layer_param(l, "mlp.linear_fc2.bias").grad, *dmlp, a.gelu,
                      fc2.value);
  be_.gelu_backward(w.dfc1, a.fc1, w.dgelu);
  be_.matmul_backward(&w.dln, &fc1.grad, &layer_param(l, "mlp.linear_fc1.bias").grad, w.dfc1, a.ln2,
                      fc1.value);
  // TODO(tp): all_reduce dln over tp (backward of copy_to_tp_region).
  Param& ln2w = layer_param(l, "pre_mlp_layernorm.weight");
  be_.layernorm_backward(dres, ln2w.grad, layer_param(l, "pre_mlp_layernorm.bias").grad, w.dln, a.res1,
                         ln2w.value, a.ln2_mean, a.ln2_rstd);

  // ---- attention block: res1 = x + drop(proj(attn(qkv(ln1(x))))) ----
  const Tensor* datt_out = &dres;
  if (p > 0) {
    be_.dropout_backward(w.tmp, dres, p, dropout_key(seed, l, 0), counter);
    datt_out = &w.tmp;
  }
  Param& proj = layer_param(l, "self_attention.linear_proj.weight");
  Param& qkv = layer_param(l, "self_attention.linear_qkv.weight");
  be_.matmul_backward(&w.datt, &proj.grad, &layer_param(l, "self_attention.linear_proj.bias").grad,
                      *datt_out, a.att, proj.value);
  be_.attention_backward(w.dqkv, w.datt, a.qkv, a.att, a.lse, static_cast<int>(NH_tp));
  be_.matmul_backward(&w.dln, &qkv.grad, &layer_param(l, "self_attention.linear_qkv.bias").grad, w.dqkv,
                      a.ln1, qkv.value);
  // TODO(tp): all_reduce dln over tp.
  Param& ln1w = layer_param(l, "input_layernorm.weight");
  be_.layernorm_backward(dres, ln1w.grad, layer_param(l, "input_layernorm.bias").grad, w.dln, x,
                         ln1w.value, a.ln1_mean, a.ln1_rstd);
}

}  // namespace tripod::model
