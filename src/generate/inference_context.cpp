// Implementation of generate/inference_context.h. The layer step mirrors
// TransformerLayer::forward (model/transformer_layer.cpp) at tp 1 without
// dropout, op for op, with the same parameters (the model's StageParams),
// so a change there shows up here as a failing cache-vs-recompute test.
#include "generate/inference_context.h"

#include <algorithm>

#include "base/error.h"
#include "model/qk_norm.h"

namespace tripod::generate {

struct InferenceContext::Rows {
  Tensor tokens, positions;          // (1, n), (n) i32 on the device
  Tensor host_ids, host_positions;   // their host staging
  Tensor x;                            // (n, C) the residual stream (res1 and the layer output in place)
  Tensor ln, mean, rstd;               // (n, C), (n), (n)
  Tensor qkv, att, lse;                // (1, n, QKV), (1, n, NH*HS), (1, NH, n)
  Tensor attn_out, fc1, act, mlp_out;  // (n, C), (n, F1), (n, F), (n, C)
  model::QkNormRows qk_rows;           // --qk-layernorm (model/qk_norm.h): row maps, kept
  model::QkNormActs qk_acts;           // heads before the norm, statistics
  Tensor qk_scratch;                   // (n QKV)
};

std::string InferenceContext::unsupported(model::GptModel& m) {
  const auto& c = m.config();
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (c.layer_spec(l).moe()) return "an MoE layer routes over the whole batch of tokens";
    if (c.layer_spec(l).fp8) return "FP8 layers scale by the whole batch's amax";
  }
  if (!m.backend().device().is_cpu() && c.head_size() > 256)
    return "the block-attention kernels take head sizes up to 256";
  return "";
}

InferenceContext::InferenceContext(model::GptModel& m, int64_t max_sequence_length)
    : model_(m), be_(m.backend()), max_len_(max_sequence_length) {
  const auto& c = m.config();
  const std::string why = unsupported(m);
  TRIPOD_CHECK_HINT(why.empty(), "generate with --no-kv-cache", "no KV cache for this model: {}", why);
  TRIPOD_CHECK(m.stage().tp_size() == 1 && m.stage().cp_size() == 1 && m.stage().pre_process &&
                   m.stage().post_process && m.stage().num_local_layers == c.num_layers,
               "the KV cache runs the whole model on one process (tp 1, one stage)");
  TRIPOD_CHECK(max_len_ > 0 && max_len_ <= c.max_position_embeddings,
               "KV cache of {} tokens: need 1 to {} (max positions)", max_len_, c.max_position_embeddings);
  const DType dt = m.stage().compute_dtype;
  const int64_t kv_width = 2 * c.query_groups() * c.head_size();
  for (int64_t l = 0; l < c.num_layers; ++l) kv_.push_back(be_.empty({max_len_, kv_width}, dt));
  const int64_t C = c.hidden_size, Vp = m.padded_vocab();
  lnf_ = be_.empty({1, C}, dt);
  lnf_rstd_ = be_.empty({1}, DType::F32);
  if (!c.rmsnorm()) lnf_mean_ = be_.empty({1}, DType::F32);
  logits_ = be_.empty({1, Vp}, dt);
  if (dt != DType::F32) logits_f32_ = be_.empty({1, Vp}, DType::F32);
  host_logits_ = Tensor::empty({Vp}, DType::F32);
}

InferenceContext::~InferenceContext() = default;

size_t InferenceContext::cache_bytes() const {
  size_t n = 0;
  for (const Tensor& t : kv_) n += t.nbytes();
  return n;
}

InferenceContext::Rows& InferenceContext::rows(int64_t n) {
  for (auto& r : rows_)
    if (r->x.size(0) == n) return *r;
  const auto& c = model_.config();
  const DType dt = model_.stage().compute_dtype;
  const int64_t C = c.hidden_size, NH = c.num_attention_heads;
  auto act = [&](Shape s) { return be_.empty(s, dt); };
  auto r = std::make_unique<Rows>();
  r->tokens = be_.empty({1, n}, DType::I32);
  r->positions = be_.empty({n}, DType::I32);
  r->host_ids = Tensor::empty({1, n}, DType::I32);
  r->host_positions = Tensor::empty({n}, DType::I32);
  r->x = act({n, C});
  r->ln = act({n, C});
  r->rstd = be_.empty({n}, DType::F32);
  if (!c.rmsnorm()) r->mean = be_.empty({n}, DType::F32);
  r->qkv = act({1, n, c.qkv_width()});
  if (c.qk_layernorm) {
    r->qk_rows = model::QkNormRows::make(be_, n, NH, c.query_groups());
    r->qk_acts = model::QkNormActs::make(be_, c, n, NH, c.query_groups(), dt);
    r->qk_scratch = act({n * c.qkv_width()});
  }
  r->att = act({1, n, NH * c.head_size()});
  r->lse = be_.empty({1, NH, n}, DType::F32);
  r->attn_out = act({n, C});
  r->fc1 = act({n, c.fc1_width()});
  r->act = act({n, c.ffn_hidden_size});
  r->mlp_out = act({n, C});
  rows_.push_back(std::move(r));
  return *rows_.back();
}

void InferenceContext::forward(const int32_t* tokens, int64_t n, float* logits) {
  const auto& c = model_.config();
  const int64_t p = offset_, C = c.hidden_size;
  TRIPOD_CHECK(n > 0 && (p == 0 || n == 1), "KV cache: the prompt first, then one token per step (got {} at {})", n,
               p);
  TRIPOD_CHECK_HINT(p + n <= max_len_, "use --max-new-tokens up to the model's max positions minus the prompt",
                    "KV cache full: {} tokens + {} exceed its {} rows", p, n, max_len_);
  Rows& r = rows(n);
  std::copy(tokens, tokens + n, r.host_ids.data<int32_t>());
  be_.copy(r.tokens, r.host_ids);
  if (c.rope() && p > 0) {  // the first step's rows are 0..n-1, RoPE's default positions
    for (int64_t i = 0; i < n; ++i) r.host_positions.data<int32_t>()[i] = static_cast<int32_t>(p + i);
    be_.copy(r.positions, r.host_positions);
  }
  // Embedding: word row + (GPT-2) the position rows [p, p + n).
  const model::StageParams& sp = model_.stage_params();
  Tensor wpe_rows;
  if (sp.embedding.position_embeddings) wpe_rows = sp.embedding.position_embeddings->compute.narrow(p, n);
  Tensor x = r.x.view({1, n, C});
  be_.embedding_forward(x, r.tokens, sp.embedding.word_embeddings->compute, wpe_rows.defined() ? &wpe_rows : nullptr,
                        0);
  for (size_t l = 0; l < sp.layers.size(); ++l) layer_forward(l, r, n);
  offset_ += n;
  // The head on the last row: final norm, then the output layer (tied to the embedding unless untied).
  const Tensor last = r.x.narrow(n - 1, 1);
  const model::FinalNormParams& lnf = sp.final_layernorm;
  if (c.rmsnorm())
    be_.rmsnorm_forward(lnf_, lnf_rstd_, last, lnf.weight->compute, c.layernorm_epsilon);
  else
    be_.layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, last, lnf.weight->compute, lnf.bias->compute,
                          c.layernorm_epsilon);
  const model::Param* out_w = sp.embedding.output_layer ? sp.embedding.output_layer : sp.embedding.word_embeddings;
  be_.matmul_forward(logits_, lnf_, out_w->compute, nullptr);
  if (logits_f32_.defined()) {
    be_.cast(logits_f32_, logits_);
    be_.copy(host_logits_, logits_f32_);
  } else {
    be_.copy(host_logits_, logits_);
  }
  be_.synchronize();
  std::copy(host_logits_.data<float>(), host_logits_.data<float>() + c.vocab_size, logits);
}

// One layer on rows [p, p + n) (NOTE at the top of this file): model/transformer_layer.cpp's
// attention_forward and mlp_forward with the attention core replaced.
void InferenceContext::layer_forward(size_t l, Rows& r, int64_t n) {
  const auto& c = model_.config();
  const model::LayerParams& P = model_.stage_params().layers[l];
  const int64_t p = offset_, KV = kv_[l].size(1);
  const int NH = static_cast<int>(c.num_attention_heads);
  const int G = c.group_query_attention ? static_cast<int>(c.query_groups()) : 0;  // as the layer calls the ops
  auto bias = [](const model::Param* b) { return b ? &b->compute : nullptr; };
  if (c.rmsnorm())
    be_.rmsnorm_forward(r.ln, r.rstd, r.x, P.input_layernorm_weight->compute, c.layernorm_epsilon);
  else
    be_.layernorm_forward(r.ln, r.mean, r.rstd, r.x, P.input_layernorm_weight->compute,
                          P.input_layernorm_bias->compute, c.layernorm_epsilon);
  be_.matmul_forward(r.qkv, r.ln, P.linear_qkv_weight->compute, bias(P.linear_qkv_bias));
  if (c.qk_layernorm)
    model::qk_norm_forward(be_, c, {P.q_layernorm_weight, P.q_layernorm_bias, P.k_layernorm_weight, P.k_layernorm_bias},
                           r.qk_rows, r.qkv, r.qk_acts, r.qk_scratch);
  if (c.rope())
    be_.rope_forward(r.qkv, NH, G, c.rotary_dim(), c.rotary_base, p > 0 ? &r.positions : nullptr);
  Tensor cached = kv_[l].narrow(p, n).view({1, n, KV});
  be_.attention_kv_copy(cached, r.qkv, NH, G);
  if (p == 0) {  // prefill: the whole-sequence kernel over the prompt
    be_.attention_forward(r.att, r.lse, r.qkv, NH, G);
  } else {  // one query against every cached row, its own included
    const Tensor all = kv_[l].view({1, max_len_, KV});
    be_.attention_block_forward(r.att, r.lse, r.qkv, all, NH, G,
                                backend::AttentionBlock{0, n, 0, p + n, /*causal=*/false}, false);
  }
  be_.matmul_forward(r.attn_out, r.att, P.linear_proj_weight->compute, bias(P.linear_proj_bias));
  // res1 = x + attn_out (into x) and the MLP's norm, in one pass.
  if (c.rmsnorm())
    be_.fused_residual_rmsnorm_forward(r.x, r.ln, r.rstd, r.x, r.attn_out, P.pre_mlp_layernorm_weight->compute,
                                       c.layernorm_epsilon);
  else
    be_.fused_residual_layernorm_forward(r.x, r.ln, r.mean, r.rstd, r.x, r.attn_out,
                                         P.pre_mlp_layernorm_weight->compute, P.pre_mlp_layernorm_bias->compute,
                                         c.layernorm_epsilon);
  if (c.swiglu) {
    be_.matmul_forward(r.fc1, r.ln, P.linear_fc1_weight->compute, bias(P.linear_fc1_bias));
    be_.swiglu_forward(r.act, r.fc1);
  } else {
    be_.matmul_forward_gelu(r.act, r.fc1, r.ln, P.linear_fc1_weight->compute, bias(P.linear_fc1_bias));
  }
  be_.matmul_forward(r.mlp_out, r.act, P.linear_fc2_weight->compute, bias(P.linear_fc2_bias));
  be_.add(r.x, r.x, r.mlp_out);
}

}  // namespace tripod::generate
