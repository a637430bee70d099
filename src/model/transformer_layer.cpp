// Implementation of model/transformer_layer.h.
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

#include "model/transformer_layer.h"

#include "backend/philox.h"
#include "model/workspace.h"

namespace tripod::model {

TransformerLayer::TransformerLayer(const GptConfig& config, const StageConfig& stage, int64_t layer_number,
                                   const LayerParams& params, const TpContext& tp, backend::Backend& be,
                                   Fp8State* fp8)
    : config_(&config),
      stage_(&stage),
      layer_number_(layer_number),
      params_(params),
      be_(&be),
      num_heads_tp_(static_cast<int>(config.num_attention_heads / stage.tp_size())),
      // K/V heads: 0 (= NH_tp) unless grouped, as the GPT-2 path always called the op.
      kv_groups_tp_(config.group_query_attention ? static_cast<int>(config.query_groups() / stage.tp_size()) : 0),
      cp_comm_(stage.cp_comm_type_of(layer_number)),
      qk_norm_{params.q_layernorm_weight, params.q_layernorm_bias, params.k_layernorm_weight,
               params.k_layernorm_bias},
      linear_qkv_(params.linear_qkv_weight, params.linear_qkv_bias, tp),
      linear_proj_(params.linear_proj_weight, params.linear_proj_bias, tp),
      linear_fc1_(params.linear_fc1_weight, params.linear_fc1_bias, tp),
      linear_fc2_(params.linear_fc2_weight, params.linear_fc2_bias, tp) {
  if (stage.cp_size() > 1 && cp_comm_ == config::CpCommType::A2a)
    check_context_parallel_heads(config.num_attention_heads, config.query_groups(), stage.tp_size(), stage.cp_size());
  if (config.layer_spec(layer_number).moe()) moe_ = std::make_unique<MoeLayer>(config, stage, layer_number, params.moe, tp, be);
  if (fp8 && config.layer_spec(layer_number).fp8) {
    linear_qkv_.use_fp8(fp8->add_linear(*params.linear_qkv_weight));
    linear_proj_.use_fp8(fp8->add_linear(*params.linear_proj_weight));
    linear_fc1_.use_fp8(fp8->add_linear(*params.linear_fc1_weight));
    linear_fc2_.use_fp8(fp8->add_linear(*params.linear_fc2_weight));
  }
  if (fp8 && config.layer_spec(layer_number).fp8_attention) {
    config.fp8.check_dot_product_attention(stage.cp_size());  // the CLI checked; the API may not have
    // Megatron's module name of the attention core: <layer>.self_attention.core_attention.
    const std::string& qkv = params.linear_qkv_weight->spec.name;
    fp8_attention_ = fp8->add_attention(qkv.substr(0, qkv.rfind("linear_qkv")) + "core_attention");
  }
}

LayerActs TransformerLayer::make_acts(int64_t B, int64_t T) const {
  const GptConfig& c = *config_;
  const StageConfig& s = *stage_;
  const int64_t N = B * T, C = c.hidden_size, tp = s.tp_size(), Ns = s.local_rows(B, T);
  const int64_t C_tp = C / tp, F_tp = c.ffn_hidden_size / tp, NH_tp = c.num_attention_heads / tp;
  const int64_t QKV_tp = c.qkv_width() / tp, F1_tp = c.fc1_width() / tp;
  auto act = [&](Shape sh) { return be_->empty(sh, s.compute_dtype); };
  auto f32 = [&](Shape sh) { return be_->empty(sh, DType::F32); };
  LayerActs a;
  a.out = act({Ns, C});
  if (s.recompute == Recompute::Full) return a;
  a.ln1_rstd = f32({Ns});  // ln1, ln2: NOTE [LayerNorm outputs]
  if (!c.rmsnorm()) a.ln1_mean = f32({Ns});
  // NOTE [FP8 attention keeps its codes]: with --fp8-dot-product-attention
  // and no recomputation the backward reads only the FP8 qkv and output
  // (and the projection its kept FP8 input), so the compute-dtype qkv and
  // attention output are not kept per micro-batch: the forward writes them
  // into the workspace's dqkv and datt, free until this layer's backward
  // (attention_forward). Selective recomputation keeps qkv (it runs the
  // attention again from it), and so does --no-fp8-wgrad (the projection's
  // weight gradient reads the compute-dtype attention output).
  const bool transient_qkv =
      fp8_attention_ && s.recompute == Recompute::None && linear_proj_.fp8_linear()->fp8_wgrad();
  if (!transient_qkv) a.qkv = act({B, T, QKV_tp});
  if (c.qk_layernorm) a.qk_norm = QkNormActs::make(*be_, c, N, NH_tp, c.query_groups() / tp, s.compute_dtype);
  if (s.recompute == Recompute::None) {
    if (!transient_qkv) a.att = act({B, T, C_tp});
    a.lse = f32({B, NH_tp, T});
    if (fp8_attention_) {
      a.fp8_qkv = be_->empty({B, T, QKV_tp}, DType::E4M3);
      a.fp8_att = be_->empty({B, T, C_tp}, DType::E4M3);
    }
  }
  a.res1 = act({Ns, C});
  a.ln2_rstd = f32({Ns});
  if (!c.rmsnorm()) a.ln2_mean = f32({Ns});
  if (moe_) {
    a.moe = std::make_shared<MoeActs>();  // sized by its first forward
    return a;
  }
  a.fc1 = act({N, F1_tp});
  if (!fp8_swiglu_cast()) a.gelu = act({N, F_tp});
  if (fp8() && linear_qkv_.fp8_linear()->fp8_wgrad()) {  // --no-fp8-wgrad keeps the compute-dtype inputs only
    const int64_t in_width[4] = {C, C_tp, C, F_tp};  // qkv, proj, fc1, fc2 (qkv, fc1: gathered under SP)
    const Fp8Linear* lin[4] = {linear_qkv_.fp8_linear(), linear_proj_.fp8_linear(), linear_fc1_.fp8_linear(),
                               linear_fc2_.fp8_linear()};
    Tensor scale_inv = be_->empty({16}, DType::F32);  // 16-byte aligned slots
    for (int k = 0; k < 4; ++k) {
      const int64_t ns = lin[k]->kept_scale_numel(N, in_width[k]);  // blockwise: the transpose's block scales
      a.fp8_in[k] = {be_->empty({in_width[k], N}, DType::E4M3),
                     ns == 1 ? scale_inv.flat(4 * k, {1}) : be_->empty({ns}, DType::F32)};
    }
  }
  return a;
}

size_t LayerActs::bytes() const {
  size_t n = 0;
  for (const Tensor* t : {&ln1, &ln1_mean, &ln1_rstd, &qkv, &qk_norm.in, &qk_norm.mean, &qk_norm.rstd, &att, &lse,
                          &res1, &ln2, &ln2_mean, &ln2_rstd, &fc1, &gelu, &out, &fp8_qkv, &fp8_att})
    if (t->defined()) n += t->nbytes();
  for (const Fp8Linear::KeptInput& k : fp8_in) {
    if (k.x_t.defined()) n += k.x_t.nbytes();
    if (k.scale_inv.numel() > 1) n += k.scale_inv.nbytes();  // blockwise's block scales (else a shared slot)
  }
  if (moe) n += moe->bytes();
  return n;
}

void apply_dropout(backend::Backend& be, Tensor& out, const Tensor& x, const LayerDropout& d, uint64_t key,
                   bool backward) {
  auto one = [&](Tensor& o, const Tensor& i, uint64_t counter) {
    if (backward) be.dropout_backward(o, i, d.p, key, counter);
    else be.dropout_forward(o, i, d.p, key, counter);
  };
  if (d.runs.empty()) return one(out, x, d.counter);
  const int64_t C = x.size(-1), rows = x.numel() / C;
  const Tensor xr = x.view({rows, C});
  Tensor outr = out.view({rows, C});
  for (const DropoutRun& r : d.runs) {
    Tensor o = outr.narrow(r.row, r.rows);
    one(o, xr.narrow(r.row, r.rows), r.counter);
  }
}

// Dropout stream of (layer, site): site 0 after attention, 1 after the MLP.
uint64_t TransformerLayer::dropout_key(uint64_t seed, int site) const {
  return backend::mix64(seed, static_cast<uint64_t>(layer_number_) * 2 + static_cast<uint64_t>(site) + 1);
}

void TransformerLayer::bind_fp8(const LayerActs& a) const {
  if (!fp8()) return;
  linear_qkv_.fp8_linear()->keep_input(a.fp8_in[0]);
  linear_proj_.fp8_linear()->keep_input(a.fp8_in[1]);
  linear_fc1_.fp8_linear()->keep_input(a.fp8_in[2]);
  linear_fc2_.fp8_linear()->keep_input(a.fp8_in[3]);
}

// Whether the norm's backward may leave its output alone for `linear`'s
// weight gradient: an FP8 linear kept its input's FP8 transpose, or, under
// full recomputation, casts the recomputed norm output again (intact in
// its own buffer), the values its forward cast; the norm's backward would
// write values a last bit away (NOTE [LayerNorm outputs]), and their amax
// would move the scales.
bool TransformerLayer::keeps_norm_output(const ColumnParallelLinear& linear) const {
  // --no-fp8-wgrad: the weight gradient reads the norm output as the bf16 path does.
  if (!linear.fp8() || !linear.fp8_linear()->fp8_wgrad()) return false;
  return linear.fp8_linear()->keeps_input() || stage_->recompute == Recompute::Full;
}

const Tensor& TransformerLayer::wgrad_input(const ColumnParallelLinear& linear, Tensor& ln, Workspace& ws) const {
  if (!linear.fp8() || !linear.fp8_linear()->keeps_input()) return linear.input(ln, ws.full_a);
  return stage_->sequence_parallel_active() ? ws.full_a : ln;
}

// NOTE [FP8 SwiGLU cast]: under FP8 with delayed scaling the scales of
// fc2's input and fc1's output gradient are known before those tensors
// exist (under blockwise scaling each block's scale comes from the block
// alone), so the SwiGLU kernel writes their FP8 codes (and transposes)
// directly (backend/ops.h fp8_swiglu_cast_transpose, fp8_swiglu_block_cast
// and their backwards): the
// compute-dtype activation and d fc1 are neither written nor read back (the
// activation is not even kept: a.gelu stays undefined), and the codes are
// the unfused path's bit for bit. It needs fc2's input kept per micro-batch
// (its wgrad reads the codes, not the activation; every mode but full
// recomputation keeps it) and no fc1 bias (whose gradient would need d fc1).
bool TransformerLayer::fp8_swiglu_cast() const {
  return config_->swiglu && !moe_ && linear_fc1_.fp8() && linear_fc2_.fp8() && !linear_fc1_.has_bias() &&
         stage_->recompute != Recompute::Full && linear_fc2_.fp8_linear()->fuses_swiglu() &&
         linear_fc1_.fp8_linear()->fuses_swiglu();
}

void TransformerLayer::forward(const Tensor& x, LayerActs& a, Workspace& ws, const LayerDropout& d) const {
  bind_fp8(a);
  const Tensor& attn_out = attention_forward(x, a, ws, d);
  mlp_forward(x, attn_out, a, ws, d);
}

void TransformerLayer::recompute(const Tensor& x, LayerActs& a, Workspace& ws, const LayerDropout& d) const {
  if (stage_->recompute == Recompute::Full)
    forward(x, a, ws, d);
  else if (stage_->recompute == Recompute::Selective)
    attention_core_forward(a, ws, false);
}

void TransformerLayer::backward(const Tensor& x, LayerActs& a, Tensor& dres, Workspace& ws,
                                const LayerDropout& d) const {
  bind_fp8(a);
  mlp_backward(a, dres, ws, d);
  attention_backward(x, a, dres, ws, d);
}

// NOTE [LayerNorm outputs]: the norm's backward gives d input and writes
// the norm's output again for the next linear's weight gradient (the
// RMSNorm backward has no such output: its forward runs again, the same
// values bit for bit).
void TransformerLayer::norm_backward(Tensor& dres, Param* weight, Param* bias, const Tensor& dln, const Tensor& inp,
                                     const Tensor& mean, Tensor& rstd, Tensor* ln) const {
  backend::Backend& be = *be_;
  if (config_->rmsnorm()) {
    be.rmsnorm_backward(dres, weight->grad, dln, inp, weight->compute, rstd);
    if (ln) be.rmsnorm_forward(*ln, rstd, inp, weight->compute, config_->layernorm_epsilon);
  } else {
    be.layernorm_backward(dres, weight->grad, bias->grad, dln, inp, weight->compute, mean, rstd, ln,
                          ln ? &bias->compute : nullptr);
  }
}

// ---- self-attention: res1 = x + drop(proj(attn(rope(qk_norm(qkv(ln1(x))))))) ----
// (qk_norm: --qk-layernorm only, model/qk_norm.h)

Tensor& TransformerLayer::attention_forward(const Tensor& x, LayerActs& a, Workspace& ws,
                                            const LayerDropout& d) const {
  backend::Backend& be = *be_;
  const LayerParams& P = params_;
  const GptConfig& c = *config_;
  // NOTE [FP8 attention keeps its codes]: qkv and att live in the workspace for this forward only.
  const bool transient = fp8_attention_ && !a.qkv.defined();
  if (transient) {
    a.qkv = ws.dqkv;
    a.att = ws.datt;
  }
  if (c.rmsnorm())
    be.rmsnorm_forward(a.ln1, a.ln1_rstd, x, P.input_layernorm_weight->compute, c.layernorm_epsilon);
  else
    be.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, P.input_layernorm_weight->compute,
                         P.input_layernorm_bias->compute, c.layernorm_epsilon);
  linear_qkv_.forward(be, a.qkv, a.ln1, ws.full_a);  // ln1 gathered to (N, C) under SP
  if (c.qk_layernorm) qk_norm_forward(be, c, qk_norm_, ws.qk_rows, a.qkv, a.qk_norm, ws.qk_scratch);
  if (c.rope()) be.rope_forward(a.qkv, num_heads_tp_, kv_groups_tp_, c.rotary_dim(), c.rotary_base, rope_positions(ws));
  attention_core_forward(a, ws, true);
  Tensor& attn_out = linear_proj_.forward(be, a.att, ws.full_b, ws.tmp);  // (N_sp, C)
  if (transient) {
    a.qkv = Tensor{};
    a.att = Tensor{};
  }
  if (d.p > 0) apply_dropout(be, attn_out, attn_out, d, dropout_key(d.seed, 0), false);
  return attn_out;
}

// Context parallelism's positions (NOTE [Load-balanced chunks]); null: rows 0..T-1.
const Tensor* TransformerLayer::rope_positions(const Workspace& ws) const {
  return stage_->cp_size() > 1 ? &ws.positions : nullptr;
}

void TransformerLayer::attention_core_forward(LayerActs& a, Workspace& ws, bool qkv_local) const {
  comm::Communicator* cp = stage_->cp_size() > 1 ? stage_->cp : nullptr;
  if (fp8_attention_)  // no context parallelism (refused at construction)
    fp8_attention_->forward(a.att, a.lse, a.fp8_qkv, a.fp8_att, a.qkv, num_heads_tp_, kv_groups_tp_);
  else if (!cp)
    be_->attention_forward(a.att, a.lse, a.qkv, num_heads_tp_, kv_groups_tp_);
  else if (cp_comm_ == config::CpCommType::A2a)
    UlyssesAttention(*cp, *be_, num_heads_tp_, kv_groups_tp_).forward(a.att, a.lse, a.qkv, qkv_local, ws.a2a);
  else if (cp_comm_ == config::CpCommType::AllGather)
    AllGatherAttention(*cp, *be_, num_heads_tp_, kv_groups_tp_).forward(a.att, a.lse, a.qkv, ws.all_gather);
  else
    RingAttention(*cp, *be_, num_heads_tp_, kv_groups_tp_).forward(a.att, a.lse, a.qkv, ws.ring);
}

void TransformerLayer::attention_backward(const Tensor& x, LayerActs& a, Tensor& dres, Workspace& ws,
                                          const LayerDropout& d) const {
  backend::Backend& be = *be_;
  const LayerParams& P = params_;
  const GptConfig& c = *config_;
  const Tensor* datt_out = &dres;
  if (d.p > 0) {
    apply_dropout(be, ws.tmp, dres, d, dropout_key(d.seed, 0), true);
    datt_out = &ws.tmp;
  }
  // The projection's wgrad reads its kept FP8 input; without a.att (NOTE [FP8
  // attention keeps its codes]) ws.datt gives the input's shape.
  linear_proj_.backward(be, ws.datt, *datt_out, a.att.defined() ? a.att : ws.datt, ws.full_b);
  comm::Communicator* cp = stage_->cp_size() > 1 ? stage_->cp : nullptr;
  if (fp8_attention_)
    fp8_attention_->backward(ws.dqkv, ws.datt, a.fp8_qkv, a.fp8_att, a.lse, num_heads_tp_, kv_groups_tp_);
  else if (!cp)
    be.attention_backward(ws.dqkv, ws.datt, a.qkv, a.att, a.lse, num_heads_tp_, kv_groups_tp_);
  else if (cp_comm_ == config::CpCommType::A2a)
    UlyssesAttention(*cp, be, num_heads_tp_, kv_groups_tp_).backward(ws.dqkv, ws.datt, a.qkv, a.att, a.lse, ws.a2a);
  else if (cp_comm_ == config::CpCommType::AllGather)
    AllGatherAttention(*cp, be, num_heads_tp_, kv_groups_tp_)
        .backward(ws.dqkv, ws.datt, a.qkv, a.att, a.lse, ws.all_gather);
  else
    RingAttention(*cp, be, num_heads_tp_, kv_groups_tp_).backward(ws.dqkv, ws.datt, a.qkv, a.att, a.lse, ws.ring);
  if (c.rope())
    be.rope_backward(ws.dqkv, num_heads_tp_, kv_groups_tp_, c.rotary_dim(), c.rotary_base, rope_positions(ws));
  if (c.qk_layernorm) qk_norm_backward(be, c, qk_norm_, ws.qk_rows, ws.dqkv, a.qk_norm, ws.qk_dout, ws.qk_scratch);
  const Tensor& dln1 = linear_qkv_.backward_input(be, ws.dqkv, ws.full_b, ws.dln);
  const bool kept = keeps_norm_output(linear_qkv_);
  norm_backward(dres, P.input_layernorm_weight, P.input_layernorm_bias, dln1, x, a.ln1_mean, a.ln1_rstd,
                kept ? nullptr : &a.ln1);
  linear_qkv_.backward_weight(be, ws.dqkv, wgrad_input(linear_qkv_, a.ln1, ws));
}

// ---- MLP: out = res1 + drop(fc2(act(fc1(ln2(res1))))) ----

void TransformerLayer::mlp_forward(const Tensor& x, const Tensor& attn_out, LayerActs& a, Workspace& ws,
                                   const LayerDropout& d) const {
  backend::Backend& be = *be_;
  const LayerParams& P = params_;
  const GptConfig& c = *config_;
  // The residual add after attention and the MLP's norm in one pass.
  if (c.rmsnorm())
    be.fused_residual_rmsnorm_forward(a.res1, a.ln2, a.ln2_rstd, x, attn_out, P.pre_mlp_layernorm_weight->compute,
                                      c.layernorm_epsilon);
  else
    be.fused_residual_layernorm_forward(a.res1, a.ln2, a.ln2_mean, a.ln2_rstd, x, attn_out,
                                        P.pre_mlp_layernorm_weight->compute, P.pre_mlp_layernorm_bias->compute,
                                        c.layernorm_epsilon);
  if (moe_) {  // the MoE MLP half on this rank's rows: ln2 (N_sp, C) -> ws.tmp (N_sp, C)
    Tensor& moe_out = ws.tmp;
    moe_->forward(a.ln2, moe_out, *a.moe);
    if (d.p > 0) apply_dropout(be, moe_out, moe_out, d, dropout_key(d.seed, 1), false);
    be.add(a.out, a.res1, moe_out);
    return;
  }
  const bool swiglu_cast = fp8_swiglu_cast();  // the activation goes straight to FP8; a.gelu is not written
  if (c.swiglu) {
    linear_fc1_.forward(be, a.fc1, a.ln2, ws.full_a);  // [gate | up]
    if (!swiglu_cast) be.swiglu_forward(a.gelu, a.fc1);
  } else {
    linear_fc1_.forward_gelu(be, a.gelu, a.fc1, a.ln2, ws.full_a);  // fc1 keeps the pre-GELU values
  }
  Tensor& mlp_out = swiglu_cast ? linear_fc2_.forward_swiglu(be, a.fc1, ws.full_b, ws.tmp)
                                : linear_fc2_.forward(be, a.gelu, ws.full_b, ws.tmp);
  if (d.p > 0) apply_dropout(be, mlp_out, mlp_out, d, dropout_key(d.seed, 1), false);
  be.add(a.out, a.res1, mlp_out);
}

void TransformerLayer::mlp_backward(LayerActs& a, Tensor& dres, Workspace& ws, const LayerDropout& d) const {
  backend::Backend& be = *be_;
  const LayerParams& P = params_;
  const Tensor* dmlp = &dres;
  if (d.p > 0) {
    apply_dropout(be, ws.tmp, dres, d, dropout_key(d.seed, 1), true);
    dmlp = &ws.tmp;
  }
  if (moe_) {  // d ln2 from the experts, the router and the shared expert; the MoE keeps its own input
    moe_->backward(ws.dln, *dmlp, *a.moe);
    norm_backward(dres, P.pre_mlp_layernorm_weight, P.pre_mlp_layernorm_bias, ws.dln, a.res1, a.ln2_mean,
                  a.ln2_rstd, &a.ln2);
    return;
  }
  const bool swiglu_cast = fp8_swiglu_cast();
  if (config_->swiglu) {
    // Under the SwiGLU cast fc2's wgrad reads its kept codes; x gives only the shape.
    linear_fc2_.backward(be, ws.dact, *dmlp, swiglu_cast ? ws.dact : a.gelu, ws.full_b);
    if (!swiglu_cast) be.swiglu_backward(ws.dfc1, a.fc1, ws.dact);
  } else {
    linear_fc2_.backward_dgelu(be, ws.dfc1, *dmlp, a.gelu, a.fc1, ws.full_b);  // GELU backward folded in
  }
  // Under the SwiGLU cast d fc1 goes straight to FP8 (ws.dfc1 is not written;
  // the weight gradient takes dy's codes, and fc1 has no bias).
  const Tensor& dln2 = swiglu_cast ? linear_fc1_.backward_input_swiglu(a.fc1, ws.dact, ws.full_b, ws.dln)
                                   : linear_fc1_.backward_input(be, ws.dfc1, ws.full_b, ws.dln);
  const bool kept = keeps_norm_output(linear_fc1_);
  norm_backward(dres, P.pre_mlp_layernorm_weight, P.pre_mlp_layernorm_bias, dln2, a.res1, a.ln2_mean, a.ln2_rstd,
                kept ? nullptr : &a.ln2);
  linear_fc1_.backward_weight(be, ws.dfc1, wgrad_input(linear_fc1_, a.ln2, ws));  // re-gathered under SP
}

}  // namespace tripod::model
