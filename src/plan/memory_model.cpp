// Memory model of a layout. See plan/memory_model.h for the formulas and
// their sources; docs/plan.md for the derivations.
#include "plan/memory_model.h"

#include "parallel/pp_schedule.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "backend/ops.h"
#include "base/error.h"

namespace tripod::plan {

std::string to_string(MemoryModelKind k) { return k == MemoryModelKind::kTripod ? "tripod" : "megatron"; }

MemoryModelKind memory_model_from_string(const std::string& s) {
  if (s == "tripod") return MemoryModelKind::kTripod;
  if (s == "megatron") return MemoryModelKind::kMegatron;
  TRIPOD_FAIL("unknown memory model '{}': use tripod or megatron", s);
}

// ---- model ----

void check_finalized(const GptConfig& m) {
  TRIPOD_CHECK(m.ffn_hidden_size > 0 && m.max_position_embeddings > 0,
               "plan: the model config was not finalized (call GptConfig::finalize first)");
}

std::string Layout::str() const {
  std::string s = fmt::format("tp{} pp{} dp{}", tp, pp, dp);
  if (cp > 1) s += fmt::format(" cp{}", cp);
  if (ep > 1) s += fmt::format(" ep{}", ep);
  if (vpp > 1) s += fmt::format(" vpp{}", vpp);
  s += fmt::format(" mbs{}", micro_batch);
  if (sp()) s += " sp";
  if (zero_stage >= 2) s += zero_stage == 3 ? " zero3" : " zero2";
  else if (distributed_optimizer) s += " dist-opt";
  if (dist_opt_instances > 1 && (zero_stage >= 2 || distributed_optimizer))
    s += fmt::format(" x{}-instances", dist_opt_instances);
  if (recompute != Recompute::None) s += " recompute=" + to_string(recompute);
  return s;
}

// ---- parameters and optimizer state ----

double model_state_bytes_per_param(DType p, bool distributed_optimizer, int dp, bool tripod, int zero_stage) {
  // Half precision: 2 (bf16/fp16 param) + 4 (fp32 grad) + 4 (fp32 master) + 8 (Adam m, v).
  // fp32: 4 (param = master) + 4 (grad) + 8 (Adam). The distributed optimizer
  // shards what only the optimizer touches (master + m + v) over dp.
  // tripod keeps the whole f32 values (the ParamStore) next to the compute
  // copy unless ZeRO-3 shards them: 4 + 2 more than Megatron's bf16 param.
  const bool half = p != DType::F32;
  if (zero_stage == 2) return (half ? (tripod ? 6.0 : 2.0) : 4.0) + (tripod || half ? 16.0 : 12.0) / dp;
  if (zero_stage == 3) return (half && !tripod ? 18.0 : 16.0) / dp;
  const double kept = half ? (tripod && distributed_optimizer ? 10.0 : 6.0) : 8.0;
  const double sharded = tripod && distributed_optimizer ? 16.0 : half ? 12.0 : 8.0;
  return kept + sharded / (distributed_optimizer ? dp : 1);
}

int64_t params_on_stage(const GptConfig& m, int tp, int pp, int stage) {
  const int64_t C = m.hidden_size, Vp = m.padded_vocab_size(tp);
  // Column-parallel qkv / fc1 (weights and biases split), row-parallel
  // proj / fc2 (weights split, biases replicated), norms replicated. Each
  // stage is counted with ceil(L / PP) layers (the busiest of an even split).
  const int64_t layers = (m.num_layers + pp - 1) / pp;
  int64_t n = 0;
  for (int64_t i = 0; i < layers; ++i) {
    const config::LayerSpec ls = m.layer_spec(std::min(int64_t(stage) * layers + i, m.num_layers - 1));
    n += ls.tp_sharded_parameters() / tp + ls.tp_replicated_parameters();
  }
  if (stage == 0) n += Vp * C / tp + (m.learned_positions() ? m.max_position_embeddings * C : 0);
  if (stage == pp - 1) {
    n += m.layer_spec(m.num_layers - 1).norm_parameters();       // final norm
    if (m.untie_embeddings_and_output_weights) n += Vp * C / tp;  // the output layer
    else if (pp > 1) n += Vp * C / tp;                            // copy of the word embedding for the tied output layer
  }
  return n;
}

int64_t expert_params_on_stage(const GptConfig& m, int tp, int pp, int stage) {
  const int64_t layers = (m.num_layers + pp - 1) / pp;
  int64_t n = 0;
  for (int64_t i = 0; i < layers; ++i) {
    const config::LayerSpec ls = m.layer_spec(std::min(int64_t(stage) * layers + i, m.num_layers - 1));
    if (!ls.moe()) continue;
    const int64_t bC = ls.bias ? ls.hidden_size : 0;  // fc2's bias, replicated over tp
    n += ls.num_experts * ((ls.expert_parameters(ls.moe_ffn_hidden_size) - bC) / tp + bC);
  }
  return n;
}

double sharded_working_bytes(const GptConfig& m, const Layout& l, int stage) {
  if (l.zero_stage < 2) return 0.0;
  const int64_t C = m.hidden_size, Vp = m.padded_vocab_size(l.tp);
  const int64_t layers = (m.num_layers + l.pp - 1) / l.pp;
  int64_t layer = 0;
  for (int64_t i = 0; i < layers; ++i) {
    const config::LayerSpec ls = m.layer_spec(std::min(int64_t(stage) * layers + i, m.num_layers - 1));
    layer = std::max(layer, ls.tp_sharded_parameters() / l.tp + ls.tp_replicated_parameters());
  }
  const bool first = stage == 0, last = stage == l.pp - 1;
  const bool holds_embedding = first || (last && (l.pp > 1 || m.untie_embeddings_and_output_weights));
  const double pos = first && m.learned_positions() ? double(m.max_position_embeddings * C) : 0.0;
  const double E = holds_embedding ? double(Vp * C / l.tp) + pos : 0.0, G = double(layer);
  const double grads = (E + 2.0 * G) * 4.0;
  if (l.zero_stage == 2) return grads;
  const double p = l.dtype == DType::F32 ? 4.0 : 2.0;
  const double in_layer = grads + (l.overlap_param_gather ? 2.0 : 1.0) * G * p;
  // The embedding gathered (its backward on stage 0, the loss head's on the
  // last stage) next to its gradients and the last layer's being reduced.
  const double in_embedding = E > 0 ? (E + G) * 4.0 + E * p : 0.0;
  return std::max(in_layer, in_embedding);
}

// The embedding group's elements held on `stage` (E of sharded_working_bytes).
static double embedding_group_elems(const GptConfig& m, const Layout& l, int stage) {
  const bool first = stage == 0, last = stage == l.pp - 1;
  if (!(first || (last && (l.pp > 1 || m.untie_embeddings_and_output_weights)))) return 0.0;
  const double pos = first && m.learned_positions() ? double(m.max_position_embeddings * m.hidden_size) : 0.0;
  return double(m.padded_vocab_size(l.tp) * m.hidden_size / l.tp) + pos;
}

double cpu_half_scratch_bytes(const GptConfig& m, const Layout& l, int stage) {
  if (l.dtype == DType::F32) return 0.0;
  const double N = double(l.micro_batch * m.seq_length), C = double(m.hidden_size), t = l.tp;
  const double Q = double(m.qkv_width()), F = double(m.ffn_hidden_size), F1 = double(m.fc1_width());
  // A linear's backward widens dout, the input, the weight and dinp.
  auto linear = [&](double in, double out) { return 4.0 * (2.0 * N * in + N * out + in * out); };
  const double layer = std::max({linear(C, Q / t), linear(C / t, C), linear(C, F1 / t), linear(F / t, C)});
  const double W = sharded_working_bytes(m, l, stage);
  if (stage != l.pp - 1) return layer;
  const double V = double(m.padded_vocab_size(l.tp) / l.tp);
  const double R = double(config::head_chunk_rows(l.micro_batch * m.seq_length, int64_t(V), 2));
  const double head = std::max(2.0 * R * V * 4.0, 4.0 * (R * V + V * C + 2.0 * N * C));
  // What ZeRO-2/-3 hold in the loss head: the embedding's f32 gradient
  // (and under ZeRO-3 its gathered compute copy); the layers' are not bound yet.
  const double E = l.zero_stage >= 2 ? embedding_group_elems(m, l, stage) : 0.0;
  const double at_head = E * (l.zero_stage == 3 ? 6.0 : 4.0);
  return std::max(layer, at_head + head - W);
}

// ---- activations ----

double paper_layer_activation_bytes(const GptConfig& m, int64_t b, int tp, bool sp, Recompute r) {
  const double s = double(m.seq_length), h = double(m.hidden_size), a = double(m.num_attention_heads);
  const double f = double(m.ffn_hidden_size) / h, t = tp, sbh = s * double(b) * h;
  if (r == Recompute::Full) return 2.0 * sbh / (sp && tp > 1 ? t : 1.0);
  const double attn_scores = r == Recompute::Selective ? 0.0 : 5.0 * a * s * s * double(b) / t;
  if (tp == 1) return sbh * (18.0 + 4.0 * f) + attn_scores;
  if (sp) return sbh * (18.0 + 4.0 * f) / t + attn_scores;
  return sbh * (10.0 + (8.0 + 4.0 * f) / t) + attn_scores;
}

double tripod_layer_activation_bytes(const GptConfig& m, int64_t b, int tp, bool sp, int act_bytes, Recompute r) {
  const double N = double(b * m.seq_length), Nsp = sp && tp > 1 ? N / tp : N;
  const double h = double(m.hidden_size), a = double(m.num_attention_heads), F = double(m.ffn_hidden_size);
  const double act = act_bytes, Q = double(m.qkv_width()), F1 = double(m.fc1_width());
  if (r == Recompute::Full) return act * Nsp * h;  // out only
  // res1, out (N_sp, C); qkv, fc1 (gelu input or [gate | up]), act; 4
  // LayerNorm statistics (2 RMSNorm ones). The norm outputs are workspace
  // (model/transformer_layer.cpp, NOTE [LayerNorm outputs]).
  double bytes = act * (2.0 * Nsp * h + N * (Q + F1 + F) / tp) + 4.0 * ((m.rmsnorm() ? 2.0 : 4.0) * Nsp);
  if (r == Recompute::None) bytes += act * N * h / tp + 4.0 * N * a / tp;  // att, lse
  return bytes;
}

double tripod_moe_layer_activation_bytes(const config::LayerSpec& s, int64_t b, int64_t seq_length, int act_bytes,
                                         int ep) {
  const double N = double(b * seq_length), C = double(s.hidden_size), E = double(s.num_experts);
  const double k = double(s.router_topk), Fe = double(s.moe_ffn_hidden_size), Fe1 = s.swiglu ? 2.0 * Fe : Fe;
  const double Fs = double(s.shared_expert_size), Fs1 = s.swiglu ? 2.0 * Fs : Fs, Re = N * k, act = act_bytes;
  double bytes = act * (N * C + 2.0 * N * k * C + Re * (C + Fe1 + Fe) + (Fs > 0 ? N * (Fs1 + Fs + C) : 0.0));
  double f32 = (act_bytes != 4 ? N * C : 0.0) + 2.0 * N * E + 3.0 * N * k + 2.0 + E + (ep > 1 ? Re : 0.0);
  if (s.shared_expert_gate) f32 += 4.0 * N;
  return bytes + 4.0 * f32;
}

double tripod_moe_workspace_bytes(const config::LayerSpec& s, int64_t b, int64_t seq_length, int act_bytes, int ep) {
  const double N = double(b * seq_length), C = double(s.hidden_size), E = double(s.num_experts);
  const double k = double(s.router_topk), Fe = double(s.moe_ffn_hidden_size), Fe1 = s.swiglu ? 2.0 * Fe : Fe;
  const double Re = N * k, act = act_bytes;
  return 4.0 * N * (k + E) + act * (2.0 * N * k * C + (ep > 1 ? 3.0 : 2.0) * Re * C + Re * (Fe + Fe1));
}

double tripod_stage_extra_activation_bytes(const GptConfig& m, int64_t b, int tp, bool sp, bool post_process,
                                           int act_bytes) {
  const double N = double(b * m.seq_length), Nsp = sp && tp > 1 ? N / tp : N, h = double(m.hidden_size);
  const double act = act_bytes;
  double n = act * Nsp * h;                                          // stage input
  if (post_process)  // lnf (+ mean, rstd; RMSNorm: rstd only), losses, dlnf
    n += act * Nsp * h + 4.0 * ((m.rmsnorm() ? 1.0 : 2.0) * Nsp + N) + act * Nsp * h;
  return n;
}

// Warm-up micro-batches of pipeline rank r plus the one in its steady state
// (Megatron's schedules.py): 1F1B min(P - r, m); interleaved, in model
// chunks of L/(P v) layers, min(m v, 2(P - 1 - r) + (v - 1) P + 1).
static double inflight_on_rank(int pp, int vpp, int64_t m, int rank) {
  if (pp == 1) return 1.0;
  if (vpp <= 1) return double(std::min<int64_t>(pp - rank, m));
  const int64_t chunks = std::min<int64_t>(m * vpp, 2 * (pp - 1 - rank) + int64_t(vpp - 1) * pp + 1);
  return double(chunks) / vpp;
}

double inflight_microbatches(int pp, int vpp, int64_t m) { return inflight_on_rank(pp, vpp, m, 0); }

static double stage_activations(const GptConfig& m, const Layout& l, int stage) {
  const double layers = double((m.num_layers + l.pp - 1) / l.pp);
  const double inflight = inflight_on_rank(l.pp, l.vpp, l.num_microbatches(), stage);
  const double s = double(m.seq_length), h = double(m.hidden_size), b = double(l.micro_batch);
  const double sp_div = l.sp() ? l.tp : 1.0;
  double bytes = inflight * layers * paper_layer_activation_bytes(m, l.micro_batch, l.tp, l.sp(), l.recompute);
  // Full recompute rebuilds one layer's activations at a time in backward.
  if (l.recompute == Recompute::Full)
    bytes += paper_layer_activation_bytes(m, l.micro_batch, l.tp, l.sp(), Recompute::None);
  if (stage == 0) bytes += inflight * s * b * h / sp_div;  // embedding dropout mask (1 byte)
  if (stage == l.pp - 1) {
    // One micro-batch in the loss head: final-norm input, output-layer input,
    // fp32 logits for the cross entropy (the paper's 4sbv/t).
    bytes += 2.0 * s * b * h / sp_div + 2.0 * s * b * h + 4.0 * s * b * double(m.padded_vocab_size(l.tp)) / l.tp;
  }
  // The paper counts 16-bit activations; fp32 training keeps twice as many bytes.
  if (l.dtype == DType::F32) bytes *= 2.0;
  return bytes;
}

static int act_bytes_of(DType p) { return p == DType::F32 ? 4 : 2; }

double tripod_model_workspace_bytes(const GptConfig& m, int64_t b, int tp, bool sp, bool post_process, Recompute r,
                                    DType dtype) {
  const double N = double(b * m.seq_length), Nsp = sp && tp > 1 ? N / tp : N;
  const double C = double(m.hidden_size), F = double(m.ffn_hidden_size), act = act_bytes_of(dtype);
  const double Q = double(m.qkv_width()), F1 = double(m.fc1_width()), dact = m.swiglu ? F : 0.0;
  // Layer scratch ln, dresidual, dln, tmp (N_sp, C); dqkv, datt, dfc1 (N, *_tp); SwiGLU's dact.
  const double scratch = act * (4.0 * Nsp * C + N * (Q + C + F1 + dact) / tp);
  // full_b (N, C); full_a (N, C) under sequence parallelism only.
  double n = act * N * C * (sp && tp > 1 ? 2.0 : 1.0);
  if (post_process) {
    // The loss head's logits, a row chunk of at most 1 GiB (the model's
    // config::head_chunk_rows), hold the backward scratch when large enough.
    const int64_t V_tp = m.padded_vocab_size(tp) / tp;
    const double logits = double(config::head_chunk_rows(b * m.seq_length, V_tp, int64_t(act))) * double(V_tp) * act;
    n += std::max(logits, scratch) + 4.0 * 3.0 * N;  // + row_max, ce_sums
  } else {
    n += scratch;
  }
  // The layer being recomputed: selective att + lse; full all but out.
  if (r == Recompute::Selective)
    n += tripod_layer_activation_bytes(m, b, tp, sp, int(act), Recompute::None) -
         tripod_layer_activation_bytes(m, b, tp, sp, int(act), Recompute::Selective);
  if (r == Recompute::Full)
    n += tripod_layer_activation_bytes(m, b, tp, sp, int(act), Recompute::None) -
         tripod_layer_activation_bytes(m, b, tp, sp, int(act), Recompute::Full);
  return n;
}

double cudnn_dq_workspace_bytes(const GptConfig& m, int64_t b, int tp, DType dtype, bool deterministic) {
  if (dtype == DType::F32) return 0;
  const int64_t heads = m.num_attention_heads / tp;
  if (!deterministic) return double(b * m.seq_length * (m.hidden_size / tp) * 4);  // f32 dQ accumulator
  const int64_t t64 = (m.seq_length + 63) / 64 * 64;
  return double(b * heads * t64 * t64 * 2);  // dS, 2 bytes per score
}

// What tripod keeps: every in-flight micro-batch's MicroBatchActs (per model
// chunk: its input and layers; the last chunk's loss head), each chunk's
// scratch buffers, and the CUDA library workspaces.
// Activation slots per model chunk that pipeline rank `rank` allocates:
// tripod's stage keeps a pool per chunk (train/pipeline_stage.h), so what
// it holds is each chunk's own peak of live micro-batches over the
// schedule's order (parallel/pp_schedule.h), which with interleaving sums
// to more than the peak of all chunks together (e.g. 6 chunk slots, not 5,
// on rank 0 of pp 2, vpp 2, 4 micro-batches). A slot is taken by F(m, c)
// and given back by B(m, c).
std::vector<int> chunk_slot_peaks(int pp, int vpp, int64_t m, int rank) {
  parallel::ScheduleConfig sc;
  sc.pp_size = pp, sc.pp_rank = rank, sc.num_microbatches = int(m), sc.num_chunks = vpp;
  std::vector<int> live(size_t(vpp), 0), peak(size_t(vpp), 0);
  for (const auto& st : parallel::schedule_order(sc)) {
    int& n = live[size_t(st.chunk)];
    n += st.kind == 'F' ? 1 : -1;
    peak[size_t(st.chunk)] = std::max(peak[size_t(st.chunk)], n);
  }
  return peak;
}

Fp8Bytes tripod_fp8_bytes(const GptConfig& m, int64_t b, int tp, Recompute r, int64_t first_layer,
                          int64_t num_layers, int shard_ranks, int act_bytes) {
  Fp8Bytes f;
  if (!m.fp8.enabled()) return f;
  int64_t fp8_layers = 0, fp8_dense = 0, fp8_attention = 0;
  for (int64_t i = first_layer; i < std::min(first_layer + num_layers, m.num_layers); ++i) {
    const config::LayerSpec ls = m.layer_spec(i);
    fp8_layers += ls.fp8 ? 1 : 0;
    fp8_dense += ls.fp8 && !ls.moe() ? 1 : 0;
    fp8_attention += ls.fp8_attention ? 1 : 0;
  }
  if (fp8_layers == 0) return f;
  const double N = double(b * m.seq_length), C = double(m.hidden_size), F = double(m.ffn_hidden_size);
  const double Q = double(m.qkv_width()), F1 = double(m.fc1_width()), t = tp, n = double(fp8_layers);
  f.weights = n * 2.0 * C * (Q + C + F1 + F) / t;
  // The kept input transposes and their scale_inv: 16 f32 slots, or under
  // blockwise scaling one f32 per 128 rows of each column (backend/ops.h
  // fp8_block_cast; the weights' 128x128 tile scales are a 1/16384 part).
  // --no-fp8-wgrad (fp8_wgrad() false): the weight gradients run in the
  // compute dtype on the layer's kept compute-dtype inputs, so no transpose
  // (nor its scales) is kept, and the SwiGLU cast is not fused (fc2's wgrad
  // reads the activation): the FP8 layer keeps what a bf16 layer keeps.
  const bool fp8_wgrad = m.fp8.fp8_wgrad();
  const double kept_width = C + C / t + C + F / t, row_blocks = std::ceil(N / double(backend::kFp8Block));
  const double kept_scales = m.fp8.blockwise() ? 4.0 * row_blocks * kept_width : 64.0;
  if (r != Recompute::Full && fp8_wgrad) f.per_microbatch = n * (N * kept_width + kept_scales);
  // NOTE [FP8 SwiGLU cast] (model/transformer_layer.cpp): no compute-dtype activation kept.
  if (r != Recompute::Full && fp8_wgrad && m.swiglu && (m.fp8.delayed() || m.fp8.blockwise()) &&
      !m.add_bias_linear)
    f.swiglu_act_saved = double(fp8_dense) * double(act_bytes) * N * F / t;
  // x's codes; under full recompute the FP8 wgrad casts x again with its
  // transpose. dy's codes and transpose (Fp8State::scratch slot 1). Under
  // --no-fp8-wgrad neither transpose is taken (Fp8Linear::quantize_grad).
  const double x = N * std::max(C, F / t), dy = N * std::max({Q / t, C, F1 / t});
  f.scratch = x * (r == Recompute::Full && fp8_wgrad ? 2.0 : 1.0) + dy * (fp8_wgrad ? 2.0 : 1.0);
  if (m.fp8.blockwise()) f.scratch *= 1.0 + 4.0 / double(backend::kFp8Block);  // an f32 scale per 128 codes
  if (m.fp8.dot_product_attention) {  // qkv8 and att8; the backward's dout and dqkv codes
    const double attention = N * (Q + C) / t;
    if (r == Recompute::None) f.per_microbatch += n * attention;
    // NOTE [FP8 attention keeps its codes] (model/transformer_layer.cpp): no compute-dtype qkv and output kept
    // (kept under --no-fp8-wgrad: the projection's wgrad reads the compute-dtype attention output).
    if (r == Recompute::None && fp8_wgrad)
      f.attention_act_saved = double(fp8_attention) * double(act_bytes) * attention;
    f.scratch += attention * (r == Recompute::None ? 1.0 : 2.0);
  }
  if (m.fp8.param_gather && shard_ranks > 0) {
    f.gathered = n * C * (Q + C + F1 + F) / t;
    f.param_gather = std::max(f.gathered * (1.0 + 1.0 / shard_ranks), 5.0 * C * std::max({Q, C, F1, F}) / t);
  }
  return f;
}

static void tripod_stage(const GptConfig& m, const Layout& l, int stage, const MemoryOptions& o, MemoryBreakdown& mb) {
  const int act = act_bytes_of(l.dtype);
  const bool post = stage == l.pp - 1;
  const double layers = double((m.num_layers + l.pp - 1) / l.pp);
  const double layer = tripod_layer_activation_bytes(m, l.micro_batch, l.tp, l.sp(), act, l.recompute);
  const double input = tripod_stage_extra_activation_bytes(m, l.micro_batch, l.tp, l.sp(), false, act);
  const double head = tripod_stage_extra_activation_bytes(m, l.micro_batch, l.tp, l.sp(), true, act) - input;
  // Each chunk's slots hold its layers (layers / vpp) and its input; the
  // last chunk of the last stage also the loss head's.
  const std::vector<int> peaks = chunk_slot_peaks(l.pp, l.vpp, l.num_microbatches(), stage);
  mb.activations = 0;
  double fp8_fixed = 0;  // FP8 weight copies and cast scratch (Fp8Bytes)
  double pg_transient = 0, pg_gathered = 0;  // --fp8-param-gather (Fp8Bytes::param_gather)
  const int pg_ranks = l.distributed_optimizer && l.zero_stage != 3 ? l.shard_ranks() : 0;
  const int64_t chunk_layers = int64_t(layers) / l.vpp;
  for (int c = 0; c < l.vpp; ++c) {
    const double slots = peaks[size_t(c)];
    mb.activations += slots * (layers / l.vpp * layer + input);
    if (post && c == l.vpp - 1) mb.activations += slots * head;
    // Chunk c of pipeline rank `stage` holds global layers from (c pp + stage) x chunk_layers.
    const Fp8Bytes f8 = tripod_fp8_bytes(m, l.micro_batch, l.tp, l.recompute,
                                         (int64_t(c) * l.pp + stage) * chunk_layers, chunk_layers, pg_ranks, act);
    mb.activations += slots * (f8.per_microbatch - f8.swiglu_act_saved - f8.attention_act_saved);
    fp8_fixed += f8.weights + f8.scratch;
    pg_transient = std::max(pg_transient, f8.param_gather);
    pg_gathered += f8.gathered;
    // MoE layers keep MoeActs instead of the dense fc1 and act; the
    // chunk's scratch adds the largest MoE backward's (and under full
    // recompute the MoE layer being rebuilt).
    double moe_kept = 0, moe_scratch = 0;
    for (int64_t i = (int64_t(c) * l.pp + stage) * chunk_layers, e = std::min(i + chunk_layers, m.num_layers); i < e;
         ++i) {
      const config::LayerSpec ls = m.layer_spec(i);
      if (!ls.moe()) continue;
      // Under sequence parallelism each tp rank routes its own s/tp tokens
      // (m is already this cp rank's s/cp).
      const int64_t moe_seq = l.sp() && l.tp > 1 ? m.seq_length / l.tp : m.seq_length;
      const double moe = tripod_moe_layer_activation_bytes(ls, l.micro_batch, moe_seq, act, l.ep) -
                         double(act) * double(l.micro_batch * m.seq_length) * double(m.fc1_width() + m.ffn_hidden_size) / l.tp;
      if (l.recompute == Recompute::Full) moe_scratch = std::max(moe_scratch, moe);
      else moe_kept += moe;
      moe_scratch = std::max(moe_scratch, tripod_moe_workspace_bytes(ls, l.micro_batch, moe_seq, act, l.ep));
    }
    mb.activations += slots * moe_kept;
    fp8_fixed += moe_scratch;
  }
  if (pg_gathered > 0) {
    // --fp8-param-gather: the f32 all-gather of the other parameters goes
    // through packed send and receive buffers, 4 (d + 1) bytes for each of
    // the longest rank's count of them (at most all P - W, P the stage's
    // parameters), unless that is over half the piece P/d (then the gather
    // stays whole, without them).
    const double P = double(mb.params_per_gpu), d = pg_ranks, packed = P - pg_gathered;
    if (2.0 * packed <= P / d) pg_transient = std::max(pg_transient, 4.0 * (d + 1.0) * packed);
  }
  fp8_fixed += pg_transient;
  const double chunk_ws = tripod_model_workspace_bytes(m, l.micro_batch, l.tp, l.sp(), false, l.recompute, l.dtype);
  const double head_ws = tripod_model_workspace_bytes(m, l.micro_batch, l.tp, l.sp(), true, l.recompute, l.dtype) - chunk_ws;
  mb.workspace = double(l.vpp) * chunk_ws + (post ? head_ws : 0.0) + fp8_fixed;
  if (o.cuda) mb.workspace += double(32ll << 20) + cudnn_dq_workspace_bytes(m, l.micro_batch, l.tp, l.dtype, o.deterministic);
  mb.reserved = (o.workspace_fixed_gib < 0 ? 1.0 : o.workspace_fixed_gib) * double(1ll << 30);
}

GptConfig local_sequence(const GptConfig& m, int cp) {
  GptConfig c = m;
  if (cp > 1) c.seq_length = m.seq_length / cp;
  return c;
}

// Context parallelism's K/V ring (model/context_parallel.h) per model chunk:
// two K/V blocks in flight, two dK/dV accumulators and one block's dK/dV,
// each (b, s/cp, 2 G/t HS); the first stage also gathers the learned
// position embedding's local rows and their f32 gradient. m: local_sequence's.
// --cp-comm-type all_gather: one block and its dK/dV, cp blocks gathered and
// cp dK/dV slots. a2a (NOTE [Head all-to-all]): send and recv of qkv's
// size, the head split's out and d out, and the i32 row maps (4 of qkv's
// and 4 of out's head rows).
static double cp_ring_workspace_bytes(const GptConfig& m, const Layout& l, int stage) {
  if (l.cp <= 1) return 0.0;
  const double act = l.dtype == DType::F32 ? 4.0 : 2.0, rows = double(l.micro_batch * m.seq_length);
  const double kv = rows * 2.0 * double(m.query_groups() / l.tp) * double(m.head_size());
  double per_chunk = 5.0 * act * kv;
  if (l.cp_comm == config::CpCommType::AllGather) per_chunk = (2.0 + 2.0 * l.cp) * act * kv;
  if (l.cp_comm == config::CpCommType::A2a) {
    const double qkv = rows * double(m.qkv_width() / l.tp), out = rows * double(m.hidden_size / l.tp);
    per_chunk = act * (2.0 * qkv + 2.0 * out) + 4.0 * 4.0 * (qkv + out) / double(m.head_size());
  }
  double n = double(l.vpp) * per_chunk;
  if (stage == 0 && m.learned_positions()) n += double(m.seq_length) * double(m.hidden_size) * (act + 4.0);
  return n;
}

MemoryBreakdown estimate_memory(const GptConfig& full, const Layout& l, const MemoryOptions& o) {
  check_finalized(full);
  // Under context parallelism every activation and scratch buffer holds the
  // rank's s/cp rows of each sequence; the parameters are whole, and the
  // distributed optimizer shards over dp x cp.
  const GptConfig m = local_sequence(full, l.cp);
  MemoryBreakdown best;
  for (int stage : {0, l.pp - 1}) {
    MemoryBreakdown mb;
    mb.stage = stage;
    mb.params_per_gpu = params_on_stage(m, l.tp, l.pp, stage);
    mb.bytes_per_param = model_state_bytes_per_param(l.dtype, l.distributed_optimizer, l.shard_ranks(),
                                                     o.model == MemoryModelKind::kTripod, l.zero_stage);
    mb.model_states = double(mb.params_per_gpu) * mb.bytes_per_param + sharded_working_bytes(m, l, stage);
    // Expert parallelism (docs/moe.md): each rank stores E / ep experts
    // (tripod as Megatron), each split over etp ranks (params_on_stage
    // counts them whole), and shards their optimizer state (ZeRO-2/-3:
    // gradients, parameters) over the expert-data-parallel ranks
    // (tp x dp x cp / (etp x ep)).
    if (l.ep > 1 || l.etp > 1) {
      const int64_t experts = expert_params_on_stage(m, 1, l.pp, stage),
                    kept = expert_params_on_stage(m, l.etp, l.pp, stage) / l.ep;
      const double expert_bpp = model_state_bytes_per_param(
          l.dtype, l.distributed_optimizer, std::max(1, l.shard_ranks() * l.tp / (l.etp * l.ep)),
          o.model == MemoryModelKind::kTripod, l.zero_stage);
      mb.params_per_gpu -= experts - kept;
      mb.model_states += double(kept) * expert_bpp - double(experts) * mb.bytes_per_param;
    }
    if (o.model == MemoryModelKind::kTripod) {
      // The step is the peak under every strategy. ZeRO-3 never holds the
      // whole parameters outside it: its initialization (NOTE [Sharded
      // init]) and a load (NOTE [Streamed shard load]) hold one parameter at
      // a time on the host, and a save (NOTE [Streamed shard save]) a piece
      // buffer of at most the largest parameter (4 bytes an element) on the
      // writing rank, next to the shards alone, while the step holds at
      // least that parameter's f32 gradient (sharded_working_bytes) besides
      // the same shards, and the activations.
      tripod_stage(m, l, stage, o, mb);
      mb.workspace += cp_ring_workspace_bytes(m, l, stage);
      if (!o.cuda) mb.workspace += cpu_half_scratch_bytes(m, l, stage);
    } else {
      mb.activations = stage_activations(m, l, stage);
      const double fixed = o.workspace_fixed_gib < 0 ? 2.0 : o.workspace_fixed_gib;
      mb.workspace = fixed * double(1ll << 30) + o.fragmentation * mb.activations;
    }
    if (stage == 0 || mb.total() > best.total()) best = mb;
  }
  return best;
}

}  // namespace tripod::plan
