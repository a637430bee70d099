// CPU reference: the block attention of context parallelism's K/V ring
// (backend/ops.h: attention_kv_copy, attention_block_forward/backward),
// with the math of attention.cpp restricted to a window of query rows and a
// window of K/V rows, K/V read from a kv(B,Tk,2*G*HS) = [K | V] tensor.
//
// Forward of a block, per (b, h, query row t of the window), in double:
//   s_j = q_t . k_j / sqrt(HS) over the window's K/V rows j (j <= t on a
//   causal block), l = log sum_j exp(s_j), o = sum_j exp(s_j - l) v_j;
// with accumulate, merged with the (out, lse) already there:
//   l' = log(e^lse + e^l),  out' = out e^(lse - l') + o e^(l - l').
// Backward of a block, with the final lse_t and D_t = dout_t . out_t:
//   p_tj = exp(s_tj - lse_t), ds_tj = p_tj (dout_t . v_j - D_t) / sqrt(HS),
//   dq_t += ds_tj k_j, dk_j += ds_tj q_t, dv_j += p_tj dout_t.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/attention_pair.h"
#include "backend/cpu/kernels.h"

namespace tripod::backend::cpu {

template <typename T>
void attention_kv_copy(T* dst, const T* src, int64_t B, int64_t Tn, int64_t NH, int64_t G, int64_t HS,
                       bool from_qkv) {
  const int64_t W = (NH + 2 * G) * HS, KV = 2 * G * HS, off = NH * HS;
  for (int64_t r = 0; r < B * Tn; ++r)
    for (int64_t e = 0; e < KV; ++e) {
      if (from_qkv) dst[r * KV + e] = src[r * W + off + e];
      else dst[r * W + off + e] = src[r * KV + e];
    }
}

template <typename T>
void attention_block_forward(T* out, stat_t<T>* lse, const T* qkv, const T* kv, int64_t B, int64_t Tq,
                             int64_t Tk, int64_t NH, int64_t G, int64_t HS, const BlockWindow& w,
                             bool accumulate) {
  const int64_t W = (NH + 2 * G) * HS, KV = 2 * G * HS, C = NH * HS, group = NH / G;
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t koff = (h / group) * HS, voff = (G + h / group) * HS;
      std::vector<double> s(static_cast<size_t>(w.kv_len)), o(static_cast<size_t>(HS));
      for (int64_t i = 0; i < w.q_len; ++i) {
        const int64_t t = w.q_start + i;
        const T* q = qkv + (b * Tq + t) * W + h * HS;
        const int64_t n = w.causal ? i + 1 : w.kv_len;
        double m = -INFINITY;
        for (int64_t j = 0; j < n; ++j) {
          const T* k = kv + (b * Tk + w.kv_start + j) * KV + koff;
          double d = 0;
          for (int64_t e = 0; e < HS; ++e) d += static_cast<double>(q[e]) * k[e];
          s[j] = d * scale;
          m = std::max(m, s[j]);
        }
        double z = 0;
        for (int64_t j = 0; j < n; ++j) z += std::exp(s[j] - m);
        const double l = m + std::log(z);
        std::fill(o.begin(), o.end(), 0.0);
        for (int64_t j = 0; j < n; ++j) {
          const double p = std::exp(s[j] - l);
          const T* v = kv + (b * Tk + w.kv_start + j) * KV + voff;
          for (int64_t e = 0; e < HS; ++e) o[e] += p * v[e];
        }
        T* ot = out + (b * Tq + t) * C + h * HS;
        stat_t<T>& lt = lse[(b * NH + h) * Tq + t];
        if (accumulate && std::isfinite(static_cast<double>(lt))) {
          const double old = lt, hi = std::max(old, l);
          const double merged = hi + std::log(std::exp(old - hi) + std::exp(l - hi));
          const double a = std::exp(old - merged), c = std::exp(l - merged);
          for (int64_t e = 0; e < HS; ++e) ot[e] = static_cast<T>(a * ot[e] + c * o[e]);
          lt = static_cast<stat_t<T>>(merged);
        } else {
          for (int64_t e = 0; e < HS; ++e) ot[e] = static_cast<T>(o[e]);
          lt = static_cast<stat_t<T>>(l);
        }
      }
    }
  }
}

template <typename T>
void attention_block_backward(T* dqkv, T* dkv, const T* dout, const T* qkv, const T* kv, const T* out,
                              const stat_t<T>* lse, int64_t B, int64_t Tq, int64_t Tk, int64_t NH, int64_t G,
                              int64_t HS, const BlockWindow& w) {
  const int64_t W = (NH + 2 * G) * HS, KV = 2 * G * HS, C = NH * HS, group = NH / G;
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  // One task per (b, K/V head): it owns that head's dk, dv of the window and
  // the dq of its group's query heads.
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t g = 0; g < G; ++g) {
      const int64_t koff = g * HS, voff = (G + g) * HS;
      std::vector<double> dq(static_cast<size_t>(w.q_len * HS));
      std::vector<double> dk(static_cast<size_t>(w.kv_len * HS), 0.0), dv(dk.size(), 0.0);
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        std::fill(dq.begin(), dq.end(), 0.0);
        for (int64_t i = 0; i < w.q_len; ++i) {
          const int64_t t = w.q_start + i;
          const T* q = qkv + (b * Tq + t) * W + h * HS;
          const T* dot = dout + (b * Tq + t) * C + h * HS;
          const T* ot = out + (b * Tq + t) * C + h * HS;
          double D = 0;
          for (int64_t e = 0; e < HS; ++e) D += static_cast<double>(dot[e]) * ot[e];
          const double l = lse[(b * NH + h) * Tq + t];
          const int64_t n = w.causal ? i + 1 : w.kv_len;
          for (int64_t j = 0; j < n; ++j) {
            const T* k = kv + (b * Tk + w.kv_start + j) * KV + koff;
            const T* v = kv + (b * Tk + w.kv_start + j) * KV + voff;
            attention_pair_backward(q, k, v, dot, D, l, scale, HS, &dq[i * HS], &dk[j * HS], &dv[j * HS]);
          }
        }
        for (int64_t i = 0; i < w.q_len; ++i) {
          T* row = dqkv + (b * Tq + w.q_start + i) * W + h * HS;
          for (int64_t e = 0; e < HS; ++e) row[e] = static_cast<T>(row[e] + dq[i * HS + e]);
        }
      }
      for (int64_t j = 0; j < w.kv_len; ++j) {
        T* row = dkv + (b * Tk + w.kv_start + j) * KV;
        for (int64_t e = 0; e < HS; ++e) {
          row[koff + e] = static_cast<T>(row[koff + e] + dk[j * HS + e]);
          row[voff + e] = static_cast<T>(row[voff + e] + dv[j * HS + e]);
        }
      }
    }
  }
}

#define TRIPOD_INSTANTIATE(T)                                                                                 \
  template void attention_kv_copy<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t, bool);      \
  template void attention_block_forward<T>(T*, stat_t<T>*, const T*, const T*, int64_t, int64_t, int64_t,   \
                                           int64_t, int64_t, int64_t, const BlockWindow&, bool);            \
  template void attention_block_backward<T>(T*, T*, const T*, const T*, const T*, const T*, const stat_t<T>*, \
                                            int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,           \
                                            const BlockWindow&);
TRIPOD_INSTANTIATE(float)
TRIPOD_INSTANTIATE(double)
#undef TRIPOD_INSTANTIATE

}  // namespace tripod::backend::cpu
