// Implementation of generate/generate.h.
#include "generate/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/philox.h"
#include "base/error.h"

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

void generate(model::GptModel& m, std::vector<int32_t>& ids, const SamplingOptions& o) {
  auto& be = m.backend();
  const auto& cfg = m.config();
  TRIPOD_CHECK(!ids.empty(), "generate needs a non-empty prompt");
  const int64_t V = cfg.vocab_size, Vp = m.padded_vocab();
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(ids.size()), cfg.max_position_embeddings);
    model::MicroBatchActs acts = m.make_acts(1, T);
    Tensor tok = Tensor::empty({1, T}, DType::I32), zeros = Tensor::zeros({1, T}, DType::I32);
    std::copy(ids.end() - T, ids.end(), tok.data<int32_t>());
    be.copy(acts.tokens, tok);
    be.copy(acts.targets, zeros);
    m.forward(acts, /*with_grad=*/false, 0.f, 0);
    const Tensor& logits = m.last_logits();  // (T, Vp)
    Tensor last = Tensor::empty({Vp}, DType::F32);
    be.copy(last, logits.narrow(T - 1, 1).view({Vp}));
    be.synchronize();
    const int32_t next = sample_token(last.data<float>(), V, o, step);
    ids.push_back(next);
    if (next == o.stop_token) break;
  }
}

Tensor sequence_logits(model::GptModel& m, const std::vector<int32_t>& ids) {
  auto& be = m.backend();
  const auto& cfg = m.config();
  const int64_t T = static_cast<int64_t>(ids.size()), V = cfg.vocab_size, Vp = m.padded_vocab();
  TRIPOD_CHECK(T > 0 && T <= cfg.max_position_embeddings, "{} tokens: need 1 to {} (max positions)", T,
               cfg.max_position_embeddings);
  model::MicroBatchActs acts = m.make_acts(1, T);
  Tensor tok = Tensor::empty({1, T}, DType::I32), zeros = Tensor::zeros({1, T}, DType::I32);
  std::copy(ids.begin(), ids.end(), tok.data<int32_t>());
  be.copy(acts.tokens, tok);
  be.copy(acts.targets, zeros);
  m.forward(acts, /*with_grad=*/false, 0.f, 0);
  Tensor padded = Tensor::empty({T, Vp}, DType::F32);
  be.copy(padded, m.last_logits());
  be.synchronize();
  Tensor out = Tensor::empty({T, V}, DType::F32);
  for (int64_t t = 0; t < T; ++t)
    std::copy(padded.data<float>() + t * Vp, padded.data<float>() + t * Vp + V, out.data<float>() + t * V);
  return out;
}

}  // namespace tripod::generate
