// CPU reference: the mixture-of-experts ops (backend/ops.h, "mixture of
// experts"): the router's top-k with its score function and its backward,
// the auxiliary losses, the dispatch order and the row gathers around the
// experts. Plain loops in double, rounded once to the output's dtype; every
// sum runs in a fixed order (slot order per token), so the results do not
// depend on how the experts' rows are grouped. References: Megatron-core
// moe/moe_utils.py (topk_routing_with_score_function,
// switch_load_balancing_loss_func, z_loss_func, apply_router_token_dropping),
// Fedus et al. 2021 (Switch), Zoph et al. 2022 (ST-MoE z-loss),
// DeepSeek-AI 2024 (V3: sigmoid scores, aux-loss-free expert bias).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/kernels.h"

namespace tripod::backend::cpu {
namespace {

// The k largest of v[0..E) in descending order; ties: the lower index first.
void top_k(const double* v, int64_t E, int k, int32_t* idx) {
  std::vector<char> taken(static_cast<size_t>(E), 0);
  for (int j = 0; j < k; ++j) {
    int64_t best = -1;
    for (int64_t e = 0; e < E; ++e)
      if (!taken[e] && (best < 0 || v[e] > v[best])) best = e;
    taken[best] = 1;
    idx[j] = static_cast<int32_t>(best);
  }
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// softmax of l[0..E) into p; returns logsumexp.
template <typename S>
double softmax(const S* l, int64_t E, double* p) {
  double mx = l[0];
  for (int64_t e = 1; e < E; ++e) mx = std::max(mx, static_cast<double>(l[e]));
  double sum = 0;
  for (int64_t e = 0; e < E; ++e) sum += (p[e] = std::exp(static_cast<double>(l[e]) - mx));
  for (int64_t e = 0; e < E; ++e) p[e] /= sum;
  return mx + std::log(sum);
}

}  // namespace

// logits (N, E), bias (E) or null -> probs (N, k), indices (N, k).
template <typename S>
void moe_router_topk(S* probs, int32_t* indices, const S* logits, const S* bias, int64_t N, int64_t E, int k,
                     bool use_sigmoid, bool pre_softmax, float scaling) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const S* l = logits + n * E;
    int32_t* idx = indices + n * k;
    std::vector<double> score(static_cast<size_t>(E)), sel(static_cast<size_t>(E));
    std::vector<double> pv(static_cast<size_t>(k));
    if (!use_sigmoid) {
      if (pre_softmax) softmax(l, E, score.data());
      else for (int64_t e = 0; e < E; ++e) score[e] = l[e];
      top_k(score.data(), E, k, idx);
      if (pre_softmax) {
        for (int j = 0; j < k; ++j) pv[j] = score[idx[j]];
      } else {  // softmax over the chosen logits
        double mx = score[idx[0]], sum = 0;
        for (int j = 0; j < k; ++j) sum += (pv[j] = std::exp(score[idx[j]] - mx));
        for (int j = 0; j < k; ++j) pv[j] /= sum;
      }
    } else {
      for (int64_t e = 0; e < E; ++e) {
        score[e] = sigmoid(l[e]);
        sel[e] = score[e] + (bias ? static_cast<double>(bias[e]) : 0.0);
      }
      top_k(sel.data(), E, k, idx);
      double sum = 0;
      for (int j = 0; j < k; ++j) sum += (pv[j] = score[idx[j]]);
      if (k > 1)
        for (int j = 0; j < k; ++j) pv[j] /= sum + 1e-20;
    }
    for (int j = 0; j < k; ++j) probs[n * k + j] = static_cast<S>(scaling != 0.f ? pv[j] * scaling : pv[j]);
  }
}

// dprobs (N, k) -> dlogits (N, E) (overwrite).
template <typename S>
void moe_router_topk_backward(S* dlogits, const S* dprobs, const S* logits, const int32_t* indices, int64_t N,
                              int64_t E, int k, bool use_sigmoid, bool pre_softmax, float scaling) {
  const double s = scaling != 0.f ? scaling : 1.0;
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const S* l = logits + n * E;
    const int32_t* idx = indices + n * k;
    const S* dp = dprobs + n * k;
    std::vector<double> d(static_cast<size_t>(E), 0.0);
    if (!use_sigmoid && pre_softmax) {  // p_j = s softmax(l)[idx_j]
      std::vector<double> sm(static_cast<size_t>(E)), ds(static_cast<size_t>(E), 0.0);
      softmax(l, E, sm.data());
      for (int j = 0; j < k; ++j) ds[idx[j]] += s * dp[j];
      double dot = 0;
      for (int64_t e = 0; e < E; ++e) dot += sm[e] * ds[e];
      for (int64_t e = 0; e < E; ++e) d[e] = sm[e] * (ds[e] - dot);
    } else if (!use_sigmoid) {  // p_j = s softmax_j(l[idx])
      std::vector<double> q(static_cast<size_t>(k));
      double mx = l[idx[0]], sum = 0;
      for (int j = 0; j < k; ++j) mx = std::max(mx, static_cast<double>(l[idx[j]]));
      for (int j = 0; j < k; ++j) sum += (q[j] = std::exp(static_cast<double>(l[idx[j]]) - mx));
      double dot = 0;
      for (int j = 0; j < k; ++j) dot += (q[j] /= sum) * s * dp[j];
      for (int j = 0; j < k; ++j) d[idx[j]] = q[j] * (s * dp[j] - dot);
    } else {  // p_j = s g_j / (sum g + 1e-20) (k > 1), or s g_j; g = sigmoid(l[idx])
      std::vector<double> g(static_cast<size_t>(k)), dg(static_cast<size_t>(k));
      double sum = 0;
      for (int j = 0; j < k; ++j) sum += (g[j] = sigmoid(l[idx[j]]));
      if (k > 1) {
        const double S_ = sum + 1e-20;
        double dot = 0;
        for (int j = 0; j < k; ++j) dot += s * dp[j] * g[j];
        for (int j = 0; j < k; ++j) dg[j] = s * dp[j] / S_ - dot / (S_ * S_);
      } else {
        dg[0] = s * dp[0];
      }
      for (int j = 0; j < k; ++j) d[idx[j]] = dg[j] * g[j] * (1.0 - g[j]);
    }
    for (int64_t e = 0; e < E; ++e) dlogits[n * E + e] = static_cast<S>(d[e]);
  }
}

// logits (N, E) -> losses [aux, z]; dlogits (N, E) += grad_scale d(aux + z)/d logits (may be null).
template <typename S>
void moe_aux_loss(S* dlogits, S* losses, const S* logits, int64_t N, int64_t E, int k, bool use_sigmoid,
                  int64_t seq_length, float aux_coeff, float z_coeff, float grad_scale) {
  const int64_t Ng = seq_length > 0 ? seq_length : N, G = N / Ng;
  std::vector<double> sa(static_cast<size_t>(N * E)), sm(static_cast<size_t>(N * E)), lse(static_cast<size_t>(N));
  std::vector<double> count(static_cast<size_t>(G * E), 0.0), psum(static_cast<size_t>(G * E), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const S* l = logits + n * E;
    double* a = &sa[n * E];
    lse[n] = softmax(l, E, &sm[n * E]);
    if (use_sigmoid) {
      double sum = 0;
      for (int64_t e = 0; e < E; ++e) sum += (a[e] = sigmoid(l[e]));
      for (int64_t e = 0; e < E; ++e) a[e] /= sum + 1e-20;
    } else {
      for (int64_t e = 0; e < E; ++e) a[e] = sm[n * E + e];
    }
    std::vector<int32_t> idx(static_cast<size_t>(k));
    top_k(a, E, k, idx.data());
    const int64_t g = n / Ng;
    for (int j = 0; j < k; ++j) count[g * E + idx[j]] += 1;
    for (int64_t e = 0; e < E; ++e) psum[g * E + e] += a[e];
  }
  double aux = 0, z = 0;
  const double c = static_cast<double>(E) * aux_coeff / (static_cast<double>(k) * Ng * Ng) / G;
  for (int64_t i = 0; i < G * E; ++i) aux += c * count[i] * psum[i];
  for (int64_t n = 0; n < N; ++n) z += lse[n] * lse[n];
  z *= static_cast<double>(z_coeff) / N;
  losses[0] = static_cast<S>(aux);
  losses[1] = static_cast<S>(z);
  if (!dlogits) return;
  for (int64_t n = 0; n < N; ++n) {
    const S* l = logits + n * E;
    const double* a = &sa[n * E];
    const double* w = &count[(n / Ng) * E];  // d aux / d sa[n, e] = c count_g[e]
    std::vector<double> d(static_cast<size_t>(E));
    if (aux_coeff != 0.f) {
      if (use_sigmoid) {
        double sum = 0, dot = 0;
        for (int64_t e = 0; e < E; ++e) sum += sigmoid(l[e]);
        const double S_ = sum + 1e-20;
        for (int64_t e = 0; e < E; ++e) dot += c * w[e] * sigmoid(l[e]);
        for (int64_t e = 0; e < E; ++e) {
          const double g = sigmoid(l[e]);
          d[e] = (c * w[e] / S_ - dot / (S_ * S_)) * g * (1.0 - g);
        }
      } else {
        double dot = 0;
        for (int64_t e = 0; e < E; ++e) dot += a[e] * c * w[e];
        for (int64_t e = 0; e < E; ++e) d[e] = a[e] * (c * w[e] - dot);
      }
    } else {
      std::fill(d.begin(), d.end(), 0.0);
    }
    for (int64_t e = 0; e < E; ++e) {
      d[e] += static_cast<double>(z_coeff) * 2.0 * lse[n] * sm[n * E + e] / N;
      dlogits[n * E + e] = static_cast<S>(dlogits[n * E + e] + grad_scale * d[e]);
    }
  }
}

// indices, probs (N*k) -> row_map (N*k), counts (E).
template <typename S>
void moe_permute_map(int32_t* row_map, int32_t* counts, const int32_t* indices, const S* probs, int64_t slots,
                     int64_t E, int64_t capacity, bool drop_by_probs) {
  std::vector<std::vector<int32_t>> per(static_cast<size_t>(E));
  for (int64_t s = 0; s < slots; ++s) per[static_cast<size_t>(indices[s])].push_back(static_cast<int32_t>(s));
  int64_t r = 0;
  for (int64_t e = 0; e < E; ++e) {
    std::vector<int32_t>& v = per[static_cast<size_t>(e)];
    if (capacity >= 0 && static_cast<int64_t>(v.size()) > capacity) {
      if (drop_by_probs) {  // keep the highest probs (ties: the lower slot), back in slot order
        std::stable_sort(v.begin(), v.end(), [&](int32_t a, int32_t b) { return probs[a] > probs[b]; });
        v.resize(static_cast<size_t>(capacity));
        std::sort(v.begin(), v.end());
      } else {
        v.resize(static_cast<size_t>(capacity));
      }
    }
    counts[e] = static_cast<int32_t>(v.size());
    for (int32_t s : v) row_map[r++] = s;
  }
  for (; r < slots; ++r) row_map[r] = -1;
}

namespace {
// inv[slot] = the row holding it, or -1 (dropped).
std::vector<int64_t> inverse(const int32_t* row_map, int64_t R, int64_t slots) {
  std::vector<int64_t> inv(static_cast<size_t>(slots), -1);
  for (int64_t r = 0; r < R; ++r) inv[static_cast<size_t>(row_map[r])] = r;
  return inv;
}
}  // namespace

template <typename T>
void moe_permute(T* out, const T* inp, const int32_t* row_map, int64_t R, int64_t C, int k) {
#pragma omp parallel for
  for (int64_t r = 0; r < R; ++r) std::copy_n(inp + (row_map[r] / k) * C, C, out + r * C);
}

// out (N, C)[n] = sum over n's kept slots of probs[slot] inp (R, C) rows; probs null: weight 1
// (moe_permute_backward).
template <typename T>
void moe_unpermute(T* out, const T* inp, const int32_t* row_map, const stat_t<T>* probs, int64_t N, int64_t R,
                   int64_t C, int k) {
  const std::vector<int64_t> inv = inverse(row_map, R, N * k);
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    std::vector<double> acc(static_cast<size_t>(C), 0.0);
    for (int j = 0; j < k; ++j) {
      const int64_t r = inv[n * k + j];
      if (r < 0) continue;
      const double w = probs ? static_cast<double>(probs[n * k + j]) : 1.0;
      for (int64_t c = 0; c < C; ++c) acc[c] += w * static_cast<double>(inp[r * C + c]);
    }
    for (int64_t c = 0; c < C; ++c) out[n * C + c] = static_cast<T>(acc[c]);
  }
}

template <typename T>
void moe_unpermute_backward(T* dinp, stat_t<T>* dprobs, const T* dout, const T* inp, const int32_t* row_map,
                            const stat_t<T>* probs, int64_t N, int64_t R, int64_t C, int k) {
  for (int64_t s = 0; s < N * k; ++s) dprobs[s] = 0;
#pragma omp parallel for
  for (int64_t r = 0; r < R; ++r) {
    const int64_t s = row_map[r], n = s / k;
    const double p = probs[s];
    double dot = 0;
    for (int64_t c = 0; c < C; ++c) {
      dinp[r * C + c] = static_cast<T>(p * static_cast<double>(dout[n * C + c]));
      dot += static_cast<double>(dout[n * C + c]) * static_cast<double>(inp[r * C + c]);
    }
    dprobs[s] = static_cast<stat_t<T>>(dot);
  }
}

#define TRIPOD_MOE_STAT(S)                                                                                       \
  template void moe_router_topk<S>(S*, int32_t*, const S*, const S*, int64_t, int64_t, int, bool, bool, float); \
  template void moe_router_topk_backward<S>(S*, const S*, const S*, const int32_t*, int64_t, int64_t, int, bool, \
                                            bool, float);                                                         \
  template void moe_aux_loss<S>(S*, S*, const S*, int64_t, int64_t, int, bool, int64_t, float, float, float);    \
  template void moe_permute_map<S>(int32_t*, int32_t*, const int32_t*, const S*, int64_t, int64_t, int64_t, bool);
#define TRIPOD_MOE_ROWS(T)                                                                                       \
  template void moe_permute<T>(T*, const T*, const int32_t*, int64_t, int64_t, int);                            \
  template void moe_unpermute<T>(T*, const T*, const int32_t*, const stat_t<T>*, int64_t, int64_t, int64_t, int); \
  template void moe_unpermute_backward<T>(T*, stat_t<T>*, const T*, const T*, const int32_t*, const stat_t<T>*,  \
                                          int64_t, int64_t, int64_t, int);
TRIPOD_MOE_STAT(float)
TRIPOD_MOE_STAT(double)
TRIPOD_MOE_ROWS(float)
TRIPOD_MOE_ROWS(double)

}  // namespace tripod::backend::cpu
