// One pre-LayerNorm transformer layer, forward and backward:
//   res1 = x + dropout(proj(attention(qkv(ln1(x)))))
//   out  = res1 + dropout(fc2(gelu(fc1(ln2(res1)))))
// Megatron: TransformerLayer with SelfAttention and MLP (local spec).
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
  const int64_t NH_tp = config_.num_attention_heads / stage_.tp_size;
  const float eps = config_.layernorm_epsilon, p = training_ ? config_.hidden_dropout : 0.f;
  const uint64_t counter = dropout_counter(mb);
  const size_t li = static_cast<size_t>(l - stage_.first_layer);
  const LayerParams& P = sp_.layers[li];
  const LayerLinears& M = linears_[li];
  Workspace& w = *ws_;

  // ---- attention block ----
  be_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, P.input_layernorm_weight->compute,
                        P.input_layernorm_bias->compute, eps);
  M.linear_qkv.forward(be_, a.qkv, a.ln1, w.full_a);  // ln1 gathered to (N, C) under SP
  be_.attention_forward(a.att, a.lse, a.qkv, static_cast<int>(NH_tp));
  Tensor& attn_out = M.linear_proj.forward(be_, a.att, w.full_b, w.tmp);  // (N_sp, C)
  if (p > 0) be_.dropout_forward(attn_out, attn_out, p, dropout_key(seed, l, 0), counter);

  // ---- MLP block (the residual add and its LayerNorm in one pass) ----
  be_.fused_residual_layernorm_forward(a.res1, a.ln2, a.ln2_mean, a.ln2_rstd, x, attn_out,
                                       P.pre_mlp_layernorm_weight->compute, P.pre_mlp_layernorm_bias->compute,
                                       eps);
  M.linear_fc1.forward_gelu(be_, a.gelu, a.fc1, a.ln2, w.full_a);  // fc1 keeps the pre-GELU values
  Tensor& mlp_out = M.linear_fc2.forward(be_, a.gelu, w.full_b, w.tmp);
  if (p > 0) be_.dropout_forward(mlp_out, mlp_out, p, dropout_key(seed, l, 1), counter);
  be_.add(a.out, a.res1, mlp_out);
}

// dres (N_sp,C) holds d loss / d out on entry and d loss / d x on return.
void GptModel::layer_backward(int64_t l, const Tensor& x, LayerActs& a, Tensor& dres,
                              const MicroBatchActs& mb, uint64_t seed) {
  const int64_t NH_tp = config_.num_attention_heads / stage_.tp_size;
  const float p = config_.hidden_dropout;
  const uint64_t counter = dropout_counter(mb);
  const size_t li = static_cast<size_t>(l - stage_.first_layer);
  const LayerParams& P = sp_.layers[li];
  const LayerLinears& M = linears_[li];
  Workspace& w = *ws_;

  // ---- MLP block: out = res1 + drop(fc2(gelu(fc1(ln2(res1))))) ----
  const Tensor* dmlp = &dres;
  if (p > 0) {
    be_.dropout_backward(w.tmp, dres, p, dropout_key(seed, l, 1), counter);
    dmlp = &w.tmp;
  }
  M.linear_fc2.backward_dgelu(be_, w.dfc1, *dmlp, a.gelu, a.fc1, w.full_b);  // GELU backward folded in
  // NOTE [LayerNorm outputs]: d ln2 first, then the LayerNorm backward also
  // writes ln2 again (no LayerNorm output is kept per layer), then fc1's dW.
  const Tensor& dln2 = M.linear_fc1.backward_input(be_, w.dfc1, w.full_b, w.dln);
  be_.layernorm_backward(dres, P.pre_mlp_layernorm_weight->grad, P.pre_mlp_layernorm_bias->grad, dln2, a.res1,
                         P.pre_mlp_layernorm_weight->compute, a.ln2_mean, a.ln2_rstd, &a.ln2,
                         &P.pre_mlp_layernorm_bias->compute);
  M.linear_fc1.backward_weight(be_, w.dfc1, M.linear_fc1.input(a.ln2, w.full_a));  // re-gathered under SP

  // ---- attention block: res1 = x + drop(proj(attn(qkv(ln1(x))))) ----
  const Tensor* datt_out = &dres;
  if (p > 0) {
    be_.dropout_backward(w.tmp, dres, p, dropout_key(seed, l, 0), counter);
    datt_out = &w.tmp;
  }
  M.linear_proj.backward(be_, w.datt, *datt_out, a.att, w.full_b);
  be_.attention_backward(w.dqkv, w.datt, a.qkv, a.att, a.lse, static_cast<int>(NH_tp));
  const Tensor& dln1 = M.linear_qkv.backward_input(be_, w.dqkv, w.full_b, w.dln);
  be_.layernorm_backward(dres, P.input_layernorm_weight->grad, P.input_layernorm_bias->grad, dln1, x,
                         P.input_layernorm_weight->compute, a.ln1_mean, a.ln1_rstd, &a.ln1,
                         &P.input_layernorm_bias->compute);
  M.linear_qkv.backward_weight(be_, w.dqkv, M.linear_qkv.input(a.ln1, w.full_a));
}

}  // namespace tripod::model
