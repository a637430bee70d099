// CPU reference: causal self-attention, multi-head or grouped-query, written
// like the flash-attention algorithm's math (no T x T buffer is kept between
// forward and backward: only out and the per-row log-sum-exp).
// CUDA version: backend/cuda/attention.cu.
//
// qkv (B,T,(NH+2G)*HS) = [Q: NH heads | K: G heads | V: G heads]; query head
// h uses K/V head g = h / (NH/G) (G == NH: multi-head attention).
// Forward, per (b, h, t):  s_j = q_t . k_j / sqrt(HS) for j <= t,
//   lse_t = log sum_j exp(s_j),  out_t = sum_j exp(s_j - lse_t) v_j.
// Backward, with p_tj = exp(s_tj - lse_t) and D_t = dout_t . out_t:
//   dv_j += p_tj dout_t,  ds_tj = p_tj (dout_t . v_j - D_t),
//   dq_t += ds_tj k_j / sqrt(HS),  dk_j += ds_tj q_t / sqrt(HS),
// dk and dv summed over the query heads of the group.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/attention_pair.h"
#include "backend/cpu/kernels.h"

namespace tripod::backend::cpu {

template <typename T>
void attention_forward(T* out, stat_t<T>* lse, const T* qkv, int64_t B, int64_t Tn, int64_t NH,
                       int64_t G, int64_t HS) {
  const int64_t W = (NH + 2 * G) * HS, C = NH * HS, group = NH / G;
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t koff = (NH + h / group) * HS, voff = (NH + G + h / group) * HS;
      std::vector<double> s(static_cast<size_t>(Tn)), o(static_cast<size_t>(HS));
      for (int64_t t = 0; t < Tn; ++t) {
        const T* q = qkv + (b * Tn + t) * W + h * HS;
        double m = -INFINITY;
        for (int64_t j = 0; j <= t; ++j) {
          const T* k = qkv + (b * Tn + j) * W + koff;
          double d = 0;
          for (int64_t e = 0; e < HS; ++e) d += static_cast<double>(q[e]) * k[e];
          s[j] = d * scale;
          m = std::max(m, s[j]);
        }
        double z = 0;
        for (int64_t j = 0; j <= t; ++j) z += std::exp(s[j] - m);
        const double l = m + std::log(z);
        std::fill(o.begin(), o.end(), 0.0);
        for (int64_t j = 0; j <= t; ++j) {
          const double p = std::exp(s[j] - l);
          const T* v = qkv + (b * Tn + j) * W + voff;
          for (int64_t e = 0; e < HS; ++e) o[e] += p * v[e];
        }
        T* ot = out + (b * Tn + t) * C + h * HS;
        for (int64_t e = 0; e < HS; ++e) ot[e] = static_cast<T>(o[e]);
        lse[(b * NH + h) * Tn + t] = static_cast<stat_t<T>>(l);
      }
    }
  }
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out,
                        const stat_t<T>* lse, int64_t B, int64_t Tn, int64_t NH, int64_t G, int64_t HS) {
  const int64_t W = (NH + 2 * G) * HS, C = NH * HS, group = NH / G;
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  // One task per (b, K/V head): it owns that head's dk, dv and the dq of its
  // group's query heads, accumulated in double and written once.
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t g = 0; g < G; ++g) {
      const int64_t koff = (NH + g) * HS, voff = (NH + G + g) * HS;
      std::vector<double> dq(static_cast<size_t>(Tn * HS)), dk(dq.size(), 0.0), dv(dq.size(), 0.0);
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        std::fill(dq.begin(), dq.end(), 0.0);
        for (int64_t t = 0; t < Tn; ++t) {
          const T* q = qkv + (b * Tn + t) * W + h * HS;
          const T* dot = dout + (b * Tn + t) * C + h * HS;
          const T* ot = out + (b * Tn + t) * C + h * HS;
          double D = 0;
          for (int64_t e = 0; e < HS; ++e) D += static_cast<double>(dot[e]) * ot[e];
          const double l = lse[(b * NH + h) * Tn + t];
          for (int64_t j = 0; j <= t; ++j) {
            const T* k = qkv + (b * Tn + j) * W + koff;
            const T* v = qkv + (b * Tn + j) * W + voff;
            attention_pair_backward(q, k, v, dot, D, l, scale, HS, &dq[t * HS], &dk[j * HS], &dv[j * HS]);
          }
        }
        for (int64_t t = 0; t < Tn; ++t) {
          T* row = dqkv + (b * Tn + t) * W + h * HS;
          for (int64_t e = 0; e < HS; ++e) row[e] = static_cast<T>(dq[t * HS + e]);
        }
      }
      for (int64_t t = 0; t < Tn; ++t) {
        T* row = dqkv + (b * Tn + t) * W;
        for (int64_t e = 0; e < HS; ++e) {
          row[koff + e] = static_cast<T>(dk[t * HS + e]);
          row[voff + e] = static_cast<T>(dv[t * HS + e]);
        }
      }
    }
  }
}

template void attention_forward<float>(float*, float*, const float*, int64_t, int64_t, int64_t, int64_t,
                                       int64_t);
template void attention_forward<double>(double*, double*, const double*, int64_t, int64_t, int64_t, int64_t,
                                        int64_t);
template void attention_backward<float>(float*, const float*, const float*, const float*, const float*,
                                        int64_t, int64_t, int64_t, int64_t, int64_t);
template void attention_backward<double>(double*, const double*, const double*, const double*,
                                         const double*, int64_t, int64_t, int64_t, int64_t, int64_t);

}  // namespace tripod::backend::cpu
