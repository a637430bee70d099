// Memory model of a layout. See plan/memory_model.h for the formulas and
// their sources; docs/plan.md for the derivations.
#include "plan/memory_model.h"

#include "parallel/pp_schedule.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/error.h"

namespace tripod::plan {

std::string to_string(Recompute r) {
  switch (r) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
  }
  return "?";
}

Recompute recompute_from_string(const std::string& s) {
  if (s == "none") return Recompute::kNone;
  if (s == "selective") return Recompute::kSelective;
  if (s == "full") return Recompute::kFull;
  TRIPOD_FAIL("unknown recompute granularity '{}': use none, selective or full", s);
}

std::string to_string(MemoryModelKind k) { return k == MemoryModelKind::kTripod ? "tripod" : "megatron"; }

MemoryModelKind memory_model_from_string(const std::string& s) {
  if (s == "tripod") return MemoryModelKind::kTripod;
  if (s == "megatron") return MemoryModelKind::kMegatron;
  TRIPOD_FAIL("unknown memory model '{}': use tripod or megatron", s);
}

// ---- model ----

int64_t ModelSpec::padded_vocab(int tp) const {
  const int64_t multiple = make_vocab_size_divisible_by * tp;
  return (vocab_size + multiple - 1) / multiple * multiple;
}

int64_t ModelSpec::num_parameters(int64_t vocab) const {
  const int64_t C = hidden_size, F = ffn(), Q = qkv_width(), F1 = fc1_width(), b = add_bias_linear ? 1 : 0;
  const int64_t norm = rmsnorm ? C : 2 * C;
  const int64_t per_layer = 2 * norm + Q * C + b * Q + C * C + b * C + F1 * C + b * F1 + C * F + b * C;
  return vocab * C + (learned_positions ? max_positions() * C : 0) + num_layers * per_layer + norm +
         (untie_embeddings ? vocab * C : 0);
}

double ModelSpec::flops_per_token() const {
  const int64_t untied_input = untie_embeddings ? vocab_size * hidden_size : 0;
  return 6.0 * double(num_parameters(vocab_size) - untied_input) +
         6.0 * double(num_layers * seq_length * hidden_size);
}

void ModelSpec::validate() const {
  TRIPOD_CHECK(num_layers > 0, "--num-layers must be > 0 (got {})", num_layers);
  TRIPOD_CHECK(hidden_size > 0, "--hidden-size must be > 0 (got {})", hidden_size);
  TRIPOD_CHECK(num_attention_heads > 0 && hidden_size % num_attention_heads == 0,
               "--hidden-size {} must be a multiple of --num-attention-heads {}", hidden_size,
               num_attention_heads);
  TRIPOD_CHECK(seq_length > 0, "--seq-length must be > 0 (got {})", seq_length);
  TRIPOD_CHECK(vocab_size > 0, "--vocab-size must be > 0 (got {})", vocab_size);
  TRIPOD_CHECK(make_vocab_size_divisible_by > 0, "--make-vocab-size-divisible-by must be > 0");
  TRIPOD_CHECK(max_positions() >= seq_length, "--max-position-embeddings {} < --seq-length {}",
               max_positions(), seq_length);
  TRIPOD_CHECK(num_query_groups >= 0 && num_attention_heads % groups() == 0,
               "--num-attention-heads {} must be a multiple of --num-query-groups {}", num_attention_heads,
               groups());
}

std::string Layout::str() const {
  std::string s = fmt::format("tp{} pp{} dp{}", tp, pp, dp);
  if (vpp > 1) s += fmt::format(" vpp{}", vpp);
  s += fmt::format(" mbs{}", micro_batch);
  if (sp()) s += " sp";
  if (distributed_optimizer) s += " dist-opt";
  if (recompute != Recompute::kNone) s += " recompute=" + to_string(recompute);
  return s;
}

// ---- parameters and optimizer state ----

double model_state_bytes_per_param(Precision p, bool distributed_optimizer, int dp, bool tripod) {
  // Half precision: 2 (bf16/fp16 param) + 4 (fp32 grad) + 4 (fp32 master) + 8 (Adam m, v).
  // fp32: 4 (param = master) + 4 (grad) + 8 (Adam). The distributed optimizer
  // shards what only the optimizer touches (master + m + v) over dp.
  const bool half = p != Precision::kFp32;
  const double kept = half ? 6.0 : 8.0, sharded = tripod && distributed_optimizer ? 16.0 : half ? 12.0 : 8.0;
  return kept + sharded / (distributed_optimizer ? dp : 1);
}

int64_t params_on_stage(const ModelSpec& m, int tp, int pp, int stage) {
  const int64_t C = m.hidden_size, F = m.ffn(), Vp = m.padded_vocab(tp), Q = m.qkv_width(), F1 = m.fc1_width();
  const int64_t b = m.add_bias_linear ? 1 : 0, norm = m.rmsnorm ? C : 2 * C;
  // Column-parallel qkv / fc1 (weights and biases split), row-parallel
  // proj / fc2 (weights split, biases replicated), norms replicated.
  const int64_t layer_sharded = (Q * C + b * Q + C * C + F1 * C + b * F1 + C * F) / tp;
  const int64_t layer_replicated = 2 * b * C + 2 * norm;
  const int64_t layers = (m.num_layers + pp - 1) / pp;
  int64_t n = layers * (layer_sharded + layer_replicated);
  if (stage == 0) n += Vp * C / tp + (m.learned_positions ? m.max_positions() * C : 0);
  if (stage == pp - 1) {
    n += norm;                                       // final norm
    if (m.untie_embeddings) n += Vp * C / tp;        // the output layer
    else if (pp > 1) n += Vp * C / tp;               // copy of the word embedding for the tied output layer
  }
  return n;
}

// ---- activations ----

double paper_layer_activation_bytes(const ModelSpec& m, int64_t b, int tp, bool sp, Recompute r) {
  const double s = double(m.seq_length), h = double(m.hidden_size), a = double(m.num_attention_heads);
  const double f = double(m.ffn()) / h, t = tp, sbh = s * double(b) * h;
  if (r == Recompute::kFull) return 2.0 * sbh / (sp && tp > 1 ? t : 1.0);
  const double attn_scores = r == Recompute::kSelective ? 0.0 : 5.0 * a * s * s * double(b) / t;
  if (tp == 1) return sbh * (18.0 + 4.0 * f) + attn_scores;
  if (sp) return sbh * (18.0 + 4.0 * f) / t + attn_scores;
  return sbh * (10.0 + (8.0 + 4.0 * f) / t) + attn_scores;
}

double tripod_layer_activation_bytes(const ModelSpec& m, int64_t b, int tp, bool sp, int act_bytes, Recompute r) {
  const double N = double(b * m.seq_length), Nsp = sp && tp > 1 ? N / tp : N;
  const double h = double(m.hidden_size), a = double(m.num_attention_heads), F = double(m.ffn());
  const double act = act_bytes, Q = double(m.qkv_width()), F1 = double(m.fc1_width());
  if (r == Recompute::kFull) return act * Nsp * h;  // out only
  // res1, out (N_sp, C); qkv, fc1 (gelu input or [gate | up]), act; 4
  // LayerNorm statistics (2 RMSNorm ones). The norm outputs are workspace
  // (model/transformer_layer.cpp, NOTE [LayerNorm outputs]).
  double bytes = act * (2.0 * Nsp * h + N * (Q + F1 + F) / tp) + 4.0 * ((m.rmsnorm ? 2.0 : 4.0) * Nsp);
  if (r == Recompute::kNone) bytes += act * N * h / tp + 4.0 * N * a / tp;  // att, lse
  return bytes;
}

double tripod_stage_extra_activation_bytes(const ModelSpec& m, int64_t b, int tp, bool sp, bool post_process,
                                           int act_bytes) {
  const double N = double(b * m.seq_length), Nsp = sp && tp > 1 ? N / tp : N, h = double(m.hidden_size);
  const double act = act_bytes;
  double n = act * Nsp * h;                                          // stage input
  if (post_process)  // lnf (+ mean, rstd; RMSNorm: rstd only), losses, dlnf
    n += act * Nsp * h + 4.0 * ((m.rmsnorm ? 1.0 : 2.0) * Nsp + N) + act * Nsp * h;
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

static double stage_activations(const ModelSpec& m, const Layout& l, int stage) {
  const double layers = double((m.num_layers + l.pp - 1) / l.pp);
  const double inflight = inflight_on_rank(l.pp, l.vpp, l.num_microbatches(), stage);
  const double s = double(m.seq_length), h = double(m.hidden_size), b = double(l.micro_batch);
  const double sp_div = l.sp() ? l.tp : 1.0;
  double bytes = inflight * layers * paper_layer_activation_bytes(m, l.micro_batch, l.tp, l.sp(), l.recompute);
  // Full recompute rebuilds one layer's activations at a time in backward.
  if (l.recompute == Recompute::kFull)
    bytes += paper_layer_activation_bytes(m, l.micro_batch, l.tp, l.sp(), Recompute::kNone);
  if (stage == 0) bytes += inflight * s * b * h / sp_div;  // embedding dropout mask (1 byte)
  if (stage == l.pp - 1) {
    // One micro-batch in the loss head: final-norm input, output-layer input,
    // fp32 logits for the cross entropy (the paper's 4sbv/t).
    bytes += 2.0 * s * b * h / sp_div + 2.0 * s * b * h + 4.0 * s * b * double(m.padded_vocab(l.tp)) / l.tp;
  }
  // The paper counts 16-bit activations; fp32 training keeps twice as many bytes.
  if (m.precision == Precision::kFp32) bytes *= 2.0;
  return bytes;
}

static int act_bytes_of(Precision p) { return p == Precision::kFp32 ? 4 : 2; }

// model/gpt_model.h head_chunk_rows with the default 1 GiB chunk (plan does
// not link the model; tests/unit/plan checks the two agree).
int64_t head_chunk_rows_like_model(int64_t N, int64_t V_tp, int64_t elem_bytes) {
  const int64_t max_bytes = int64_t(1) << 30, row_bytes = V_tp * elem_bytes;
  if (N * row_bytes <= max_bytes) return N;
  const int64_t fit = std::max<int64_t>(1, max_bytes / row_bytes);
  const int64_t chunks = (N + fit - 1) / fit;
  return std::min(((N + chunks - 1) / chunks + 63) / 64 * 64, N);
}

double tripod_model_workspace_bytes(const ModelSpec& m, int64_t b, int tp, bool sp, bool post_process, Recompute r) {
  const double N = double(b * m.seq_length), Nsp = sp && tp > 1 ? N / tp : N;
  const double C = double(m.hidden_size), F = double(m.ffn()), act = act_bytes_of(m.precision);
  const double Q = double(m.qkv_width()), F1 = double(m.fc1_width()), dact = m.swiglu ? F : 0.0;
  // Layer scratch ln, dresidual, dln, tmp (N_sp, C); dqkv, datt, dfc1 (N, *_tp); SwiGLU's dact.
  const double scratch = act * (4.0 * Nsp * C + N * (Q + C + F1 + dact) / tp);
  // full_b (N, C); full_a (N, C) under sequence parallelism only.
  double n = act * N * C * (sp && tp > 1 ? 2.0 : 1.0);
  if (post_process) {
    // The loss head's logits, a row chunk of at most 1 GiB (model's
    // head_chunk_rows), hold the backward scratch when large enough.
    const int64_t V_tp = m.padded_vocab(tp) / tp;
    const double logits = double(head_chunk_rows_like_model(b * m.seq_length, V_tp, int64_t(act))) * double(V_tp) * act;
    n += std::max(logits, scratch) + 4.0 * 3.0 * N;  // + row_max, ce_sums
  } else {
    n += scratch;
  }
  // The layer being recomputed: selective att + lse; full all but out.
  if (r == Recompute::kSelective)
    n += tripod_layer_activation_bytes(m, b, tp, sp, int(act), Recompute::kNone) -
         tripod_layer_activation_bytes(m, b, tp, sp, int(act), Recompute::kSelective);
  if (r == Recompute::kFull)
    n += tripod_layer_activation_bytes(m, b, tp, sp, int(act), Recompute::kNone) -
         tripod_layer_activation_bytes(m, b, tp, sp, int(act), Recompute::kFull);
  return n;
}

double cudnn_dq_workspace_bytes(const ModelSpec& m, int64_t b, int tp, bool deterministic) {
  if (m.precision == Precision::kFp32) return 0;
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

static void tripod_stage(const ModelSpec& m, const Layout& l, int stage, const MemoryOptions& o, MemoryBreakdown& mb) {
  const int act = act_bytes_of(m.precision);
  const bool post = stage == l.pp - 1;
  const double layers = double((m.num_layers + l.pp - 1) / l.pp);
  const double layer = tripod_layer_activation_bytes(m, l.micro_batch, l.tp, l.sp(), act, l.recompute);
  const double input = tripod_stage_extra_activation_bytes(m, l.micro_batch, l.tp, l.sp(), false, act);
  const double head = tripod_stage_extra_activation_bytes(m, l.micro_batch, l.tp, l.sp(), true, act) - input;
  // Each chunk's slots hold its layers (layers / vpp) and its input; the
  // last chunk of the last stage also the loss head's.
  const std::vector<int> peaks = chunk_slot_peaks(l.pp, l.vpp, l.num_microbatches(), stage);
  mb.activations = 0;
  for (int c = 0; c < l.vpp; ++c) {
    const double slots = peaks[size_t(c)];
    mb.activations += slots * (layers / l.vpp * layer + input);
    if (post && c == l.vpp - 1) mb.activations += slots * head;
  }
  const double chunk_ws = tripod_model_workspace_bytes(m, l.micro_batch, l.tp, l.sp(), false, l.recompute);
  const double head_ws = tripod_model_workspace_bytes(m, l.micro_batch, l.tp, l.sp(), true, l.recompute) - chunk_ws;
  mb.workspace = double(l.vpp) * chunk_ws + (post ? head_ws : 0.0);
  if (o.cuda) mb.workspace += double(32ll << 20) + cudnn_dq_workspace_bytes(m, l.micro_batch, l.tp, o.deterministic);
  mb.reserved = (o.workspace_fixed_gib < 0 ? 1.0 : o.workspace_fixed_gib) * double(1ll << 30);
}

MemoryBreakdown estimate_memory(const ModelSpec& m, const Layout& l, const MemoryOptions& o) {
  MemoryBreakdown best;
  for (int stage : {0, l.pp - 1}) {
    MemoryBreakdown mb;
    mb.stage = stage;
    mb.params_per_gpu = params_on_stage(m, l.tp, l.pp, stage);
    mb.bytes_per_param = model_state_bytes_per_param(m.precision, l.distributed_optimizer, l.dp,
                                                     o.model == MemoryModelKind::kTripod);
    mb.model_states = double(mb.params_per_gpu) * mb.bytes_per_param;
    if (o.model == MemoryModelKind::kTripod) {
      tripod_stage(m, l, stage, o, mb);
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
