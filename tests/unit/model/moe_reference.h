// A float64 mixture-of-experts MLP written from the definitions (Megatron-core
// moe_utils.py: topk_routing_with_score_function, apply_router_token_dropping,
// switch_load_balancing_loss_func, z_loss_func; Hugging Face's Mixtral and
// Qwen2-MoE sparse blocks), token by token, with no permutation: the
// independent reference model/moe_layer.h is checked against, forward and
// (by central differences of its objective) backward.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace tripod::testing {

struct MoeRef {
  // Shape and options.
  int64_t C = 0, E = 0, k = 1, Fe = 0, Fs = 0;
  bool swiglu = false, bias = false, sigmoid = false, pre_softmax = false, gate = false;
  double scaling = 0;            // 0: none
  double capacity_factor = 0;    // 0: dropless
  bool drop_by_probs = true;
  double aux_coeff = 0, z_coeff = 0;
  int64_t seq_length = 0;        // seq_aux_loss: tokens per sequence; 0: aux_loss over all tokens
  // Weights, row-major as the checkpoint names them.
  std::vector<double> router;    // (E, C)
  std::vector<double> expert_bias;  // (E) or empty
  std::vector<std::vector<double>> w1, b1, w2, b2;  // per expert: (F1, C), (F1), (C, Fe), (C)
  std::vector<double> s_w1, s_b1, s_w2, s_b2, gate_w;  // shared expert, gate (1, C)

  static double sig(double v) { return 1 / (1 + std::exp(-v)); }

  // An MLP of width f on one token: fc2(act(fc1 x)).
  std::vector<double> mlp(const double* x, int64_t f, const std::vector<double>& W1, const std::vector<double>& B1,
                          const std::vector<double>& W2, const std::vector<double>& B2) const {
    const int64_t f1 = swiglu ? 2 * f : f;
    std::vector<double> h(f1), a(f), y(C);
    for (int64_t i = 0; i < f1; ++i) {
      double s = B1.empty() ? 0 : B1[i];
      for (int64_t c = 0; c < C; ++c) s += W1[i * C + c] * x[c];
      h[i] = s;
    }
    for (int64_t i = 0; i < f; ++i) {
      if (swiglu) {
        a[i] = h[i] * sig(h[i]) * h[f + i];  // silu(gate) * up
      } else {  // GELU, tanh approximation (Megatron's and GPT-2's)
        const double v = h[i];
        a[i] = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
      }
    }
    for (int64_t c = 0; c < C; ++c) {
      double s = B2.empty() ? 0 : B2[c];
      for (int64_t i = 0; i < f; ++i) s += W2[c * f + i] * a[i];
      y[c] = s;
    }
    return y;
  }

  // Indices of the k largest (ties: the lower index), descending.
  std::vector<int64_t> topk(const std::vector<double>& v) const {
    std::vector<int64_t> order(v.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return v[a] > v[b]; });
    order.resize(k);
    return order;
  }

  struct Out {
    std::vector<double> y;  // (N, C)
    double aux = 0, z = 0;
    std::vector<int64_t> tokens_per_expert;
  };

  Out forward(const std::vector<double>& x, int64_t N) const {
    Out o;
    o.y.assign(N * C, 0.0);
    std::vector<std::vector<double>> logits(N, std::vector<double>(E));
    std::vector<std::vector<int64_t>> idx(N);
    std::vector<std::vector<double>> prob(N);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t e = 0; e < E; ++e) {
        double s = 0;
        for (int64_t c = 0; c < C; ++c) s += router[e * C + c] * x[n * C + c];
        logits[n][e] = s;
      }
      const std::vector<double>& l = logits[n];
      std::vector<double> sm(E);
      const double mx = *std::max_element(l.begin(), l.end());
      double sum = 0;
      for (int64_t e = 0; e < E; ++e) sum += (sm[e] = std::exp(l[e] - mx));
      for (double& v : sm) v /= sum;
      if (!sigmoid && pre_softmax) {  // Qwen2-MoE: softmax, top-k, no renormalisation
        idx[n] = topk(sm);
        for (int64_t e : idx[n]) prob[n].push_back(sm[e]);
      } else if (!sigmoid) {  // Mixtral: softmax of the top-k logits (= renormalised softmax)
        idx[n] = topk(l);
        double s2 = 0;
        for (int64_t e : idx[n]) s2 += sm[e];
        for (int64_t e : idx[n]) prob[n].push_back(sm[e] / s2);
      } else {  // DeepSeek-V3: sigmoid, biased choice, renormalised unbiased scores
        std::vector<double> g(E), sel(E);
        for (int64_t e = 0; e < E; ++e) sel[e] = (g[e] = sig(l[e])) + (expert_bias.empty() ? 0 : expert_bias[e]);
        idx[n] = topk(sel);
        double s2 = 0;
        for (int64_t e : idx[n]) s2 += g[e];
        for (int64_t e : idx[n]) prob[n].push_back(k > 1 ? g[e] / (s2 + 1e-20) : g[e]);
      }
      if (scaling != 0)
        for (double& p : prob[n]) p *= scaling;
    }
    // Capacity: per expert the highest probs (or the first tokens) up to ceil(N k / E cf).
    std::vector<std::vector<bool>> kept(N, std::vector<bool>(k, true));
    if (capacity_factor > 0) {
      const int64_t cap = static_cast<int64_t>(std::ceil(double(N * k) / E * capacity_factor));
      for (int64_t e = 0; e < E; ++e) {
        std::vector<std::pair<int64_t, int64_t>> slots;  // (n, j) routed to e, in token order
        for (int64_t n = 0; n < N; ++n)
          for (int64_t j = 0; j < k; ++j)
            if (idx[n][j] == e) slots.push_back({n, j});
        if (drop_by_probs)
          std::stable_sort(slots.begin(), slots.end(),
                           [&](auto a, auto b) { return prob[a.first][a.second] > prob[b.first][b.second]; });
        for (size_t i = cap; i < slots.size(); ++i) kept[slots[i].first][slots[i].second] = false;
      }
    }
    o.tokens_per_expert.assign(E, 0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < k; ++j) {
        if (!kept[n][j]) continue;
        const int64_t e = idx[n][j];
        ++o.tokens_per_expert[e];
        const std::vector<double> y = mlp(&x[n * C], Fe, w1[e], b1[e], w2[e], b2[e]);
        for (int64_t c = 0; c < C; ++c) o.y[n * C + c] += prob[n][j] * y[c];
      }
    if (Fs > 0)
      for (int64_t n = 0; n < N; ++n) {
        const std::vector<double> y = mlp(&x[n * C], Fs, s_w1, s_b1, s_w2, s_b2);
        double g = 1;
        if (gate) {
          double s = 0;
          for (int64_t c = 0; c < C; ++c) s += gate_w[c] * x[n * C + c];
          g = sig(s);
        }
        for (int64_t c = 0; c < C; ++c) o.y[n * C + c] += g * y[c];
      }
    // Load balancing over groups (all tokens, or each sequence): Switch's
    // E coeff sum_e f_e P_e with f_e = count_e / (k T), P_e = mean score.
    const int64_t Ng = seq_length > 0 ? seq_length : N, G = N / Ng;
    for (int64_t g = 0; g < G; ++g) {
      std::vector<double> count(E, 0), P(E, 0);
      for (int64_t n = g * Ng; n < (g + 1) * Ng; ++n) {
        const std::vector<double>& l = logits[n];
        std::vector<double> s(E);
        double sum = 0;
        const double mx = *std::max_element(l.begin(), l.end());
        for (int64_t e = 0; e < E; ++e) sum += (s[e] = sigmoid ? sig(l[e]) : std::exp(l[e] - mx));
        for (double& v : s) v /= sigmoid ? sum + 1e-20 : sum;
        for (int64_t e : topk(s)) count[e] += 1;
        for (int64_t e = 0; e < E; ++e) P[e] += s[e] / Ng;
      }
      double a = 0;
      for (int64_t e = 0; e < E; ++e) a += count[e] / double(k * Ng) * P[e];
      o.aux += aux_coeff * E * a / G;
    }
    for (int64_t n = 0; n < N; ++n) {
      const std::vector<double>& l = logits[n];
      const double mx = *std::max_element(l.begin(), l.end());
      double sum = 0;
      for (double v : l) sum += std::exp(v - mx);
      const double lse = mx + std::log(sum);
      o.z += z_coeff * lse * lse / N;
    }
    return o;
  }
};

}  // namespace tripod::testing
