// Implementation of generate/generate.h.
#include "generate/generate.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "backend/philox.h"
#include "base/error.h"
#include "generate/inference_context.h"

namespace tripod::generate {

int32_t sample_token(const float* logits, int64_t V, const SamplingOptions& o, int64_t step) {
  TRIPOD_CHECK(V > 0, "empty vocabulary");
  if (o.greedy || o.temperature <= 0.f)  // argmax; ties go to the lowest id
    return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  std::vector<int32_t> idx(static_cast<size_t>(V));
  std::iota(idx.begin(), idx.end(), 0);
  // Stable order (by logit, then id) so ties cannot make runs differ.
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  size_t keep = idx.size();
  if (o.top_k > 0) keep = std::min(keep, static_cast<size_t>(o.top_k));
  // Softmax over the kept ids at this temperature, in double.
  std::vector<double> p(keep);
  const double mx = logits[idx[0]];
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += p[i] = std::exp((logits[idx[i]] - mx) / o.temperature);
  for (auto& x : p) x /= sum;
  if (o.top_p < 1.f) {  // the smallest prefix whose mass reaches top_p (at least one id)
    double cum = 0;
    size_t n = 0;
    while (n < keep && cum < o.top_p) cum += p[n++];
    keep = std::max<size_t>(n, 1);
    sum = 0;
    for (size_t i = 0; i < keep; ++i) sum += p[i];
    for (size_t i = 0; i < keep; ++i) p[i] /= sum;
  }
  const double u = backend::uniform01(backend::mix64(o.seed, 0x5EED), static_cast<uint64_t>(step));
  double cum = 0;
  for (size_t i = 0; i < keep; ++i) {
    cum += p[i];
    if (u < cum) return idx[i];
  }
  return idx[keep - 1];
}

namespace {

// Rows [first, first + n) of the last forward's logits (T, Vp), host f32 (n, V).
Tensor logits_rows(model::GptModel& m, int64_t first, int64_t n) {
  auto& be = m.backend();
  const int64_t V = m.config().vocab_size, Vp = m.padded_vocab();
  const Tensor rows = m.last_logits().flat(first * Vp, {n, Vp});
  Tensor padded = Tensor::empty({n, Vp}, DType::F32);
  if (rows.dtype() == DType::F32) {
    be.copy(padded, rows);
  } else {  // bf16 compute: cast on the device first
    Tensor wide = be.empty({n, Vp}, DType::F32);
    be.cast(wide, rows);
    be.copy(padded, wide);
  }
  be.synchronize();
  Tensor out = Tensor::empty({n, V}, DType::F32);
  for (int64_t t = 0; t < n; ++t)
    std::copy(padded.data<float>() + t * Vp, padded.data<float>() + t * Vp + V, out.data<float>() + t * V);
  return out;
}

// The whole sequence (one micro-batch of one row) through the model's forward.
void forward_ids(model::GptModel& m, const std::vector<int32_t>& ids) {
  auto& be = m.backend();
  const int64_t T = static_cast<int64_t>(ids.size());
  model::MicroBatchActs acts = m.make_acts(1, T);
  Tensor tok = Tensor::empty({1, T}, DType::I32), zeros = Tensor::zeros({1, T}, DType::I32);
  std::copy(ids.begin(), ids.end(), tok.data<int32_t>());
  be.copy(acts.tokens, tok);
  be.copy(acts.targets, zeros);
  m.forward(acts, /*with_grad=*/false, 0.f, 0);
}

// The whole sequence through the model (no cache): the logits (V) of its last token.
void recompute_last_logits(model::GptModel& m, const std::vector<int32_t>& ids, float* logits) {
  forward_ids(m, ids);
  const Tensor last = logits_rows(m, static_cast<int64_t>(ids.size()) - 1, 1);
  std::copy(last.data<float>(), last.data<float>() + m.config().vocab_size, logits);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

DecodeStats generate(model::GptModel& m, std::vector<int32_t>& ids, const SamplingOptions& o, const DecodeOptions& d) {
  const auto& cfg = m.config();
  TRIPOD_CHECK(!ids.empty(), "generate needs a non-empty prompt");
  const int64_t V = cfg.vocab_size, P = cfg.max_position_embeddings, n0 = static_cast<int64_t>(ids.size());
  TRIPOD_CHECK_HINT(n0 + o.max_new_tokens <= P,
                    n0 < P ? fmt::format("use --max-new-tokens {} or less, or a shorter prompt", P - n0)
                           : fmt::format("shorten the prompt to at most {} tokens", P - 1),
                    "the prompt ({} tokens) + --max-new-tokens {} = {} tokens exceed the model's {} positions "
                    "(--max-position-embeddings of the checkpoint)",
                    n0, o.max_new_tokens, n0 + o.max_new_tokens, P);
  DecodeStats st;
  st.prompt_tokens = n0;
  if (o.max_new_tokens <= 0) return st;
  std::unique_ptr<InferenceContext> ctx;
  if (d.kv_cache) {
    st.no_cache_reason = InferenceContext::unsupported(m);
    if (st.no_cache_reason.empty()) ctx = std::make_unique<InferenceContext>(m, n0 + o.max_new_tokens);
  }
  st.kv_cache = ctx != nullptr;
  std::vector<float> logits(static_cast<size_t>(V));
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    if (!ctx)
      recompute_last_logits(m, ids, logits.data());
    else if (step == 0)
      ctx->forward(ids.data(), n0, logits.data());
    else
      ctx->forward(&ids.back(), 1, logits.data());
    if (d.step_logits) d.step_logits->insert(d.step_logits->end(), logits.begin(), logits.end());
    const int32_t next = sample_token(logits.data(), V, o, step);
    ids.push_back(next);
    ++st.new_tokens;
    if (step == 0) {
      st.prefill_seconds = seconds_since(t0);
      t0 = std::chrono::steady_clock::now();
    }
    if (next == o.stop_token) break;
  }
  if (st.new_tokens > 1) st.decode_seconds = seconds_since(t0);
  return st;
}

Tensor sequence_logits(model::GptModel& m, const std::vector<int32_t>& ids) {
  const auto& cfg = m.config();
  const int64_t T = static_cast<int64_t>(ids.size());
  TRIPOD_CHECK(T > 0 && T <= cfg.max_position_embeddings, "{} tokens: need 1 to {} (max positions)", T,
               cfg.max_position_embeddings);
  forward_ids(m, ids);
  return logits_rows(m, 0, T);
}

}  // namespace tripod::generate
