// NOTE [FP8 attention]
// CPU reference of FP8 attention (backend/ops.h attention_fp8_forward /
// attention_fp8_backward): causal self-attention, multi-head or
// grouped-query, on E4M3 Q, K, V with per-tensor scales, as cuDNN's FP8
// flash attention (the graph of cudnn-frontend's FP8 SDPA, which
// Transformer Engine runs) defines it.
// CUDA version: backend/cuda/cudnn_attention_fp8.cpp.
//
// qkv (B,T,(NH+2G)*HS) = [Q | K | V] as attention_forward's; query head h
// uses K/V head g = h / (NH/G). X8 is a tensor's FP8 codes decoded exactly
// (fp8_to_f32); fp8(v, scale) = f32_to_fp8(f32(v) * f32(scale)), the
// rounding of the FP8 casts (fp8.cpp); *_si is the scale_inv of a tensor
// of Fp8AttentionMeta. Per (b, h), rows i and columns j <= i (entries
// j > i are masked: P = 0 and dS = 0 there, and they enter no sum):
//
// Forward
//   1. S_ij   = (sum_e Q8_ie K8_je) * qkv_si^2 / sqrt(HS)
//   2. lse_i  = log sum_j exp(S_ij)                   (exact; saved)
//   3. P_ij   = exp(S_ij - lse_i)                     s_amax = max(s_amax, P_ij)
//   4. P8_ij  = fp8(P_ij, s_scale) in E4M3
//   5. O_ie   = (sum_j P8_ij V8_je) * s_si * qkv_si     o_amax = max(o_amax, |O_ie|)
//   6. out_ie = fp8(O_ie, o_scale) in E4M3
// Backward (fmt: dout's FP8 dtype, also dqkv's)
//   7. D_i    = (sum_e dout8_ie out8_ie) * dout_si * o_si
//   8. P_ij, P8_ij as steps 1, 3, 4 with the saved lse (no s_amax)
//   9. dV_je  = (sum_{h of g} sum_i P8_ij dout8_ie) * s_si * dout_si
//  10. dP_ij  = (sum_e dout8_ie V8_je) * dout_si * qkv_si
//  11. dS_ij  = (dP_ij - D_i) * P_ij / sqrt(HS)      dp_amax = max(dp_amax, |dS_ij|)
//  12. dS8_ij = fp8(dS_ij, dp_scale) in fmt
//  13. dQ_ie  = (sum_j dS8_ij K8_je) * dp_si * qkv_si
//  14. dK_je  = (sum_{h of g} sum_i dS8_ij Q8_ie) * dp_si * qkv_si
//  15. dqkv   = fp8(d, dqkv_scale) in fmt for d = dQ, dK, dV
//                                                  dqkv_amax = max(dqkv_amax, |d|)
//
// Numerics: the products of two decoded codes are exact in double and
// every sum is a double sum; the product of each sum's descale scalars is
// formed in double and applied once, after the sum (scaling each operand
// first, as a GPU may, differs by f32 roundings). dK and dV are summed over
// the group's query heads before they are scaled and rounded: one rounding
// per element of dqkv. P and dS go through f32 before their FP8 rounding,
// as the casts' products do; lse is exact (double) within the forward and
// is read back at the statistics dtype in the backward, so the f32 and f64
// statistics paths differ only in what that storage rounds. The amaxes are
// of the unscaled values before their rounding, accumulated as fmax (NaN
// skipped) from the value they hold, and written back at the statistics
// dtype.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/kernels.h"
#include "tensor/dtype.h"

namespace tripod::backend::cpu {
namespace {

// Every code of an FP8 dtype decoded once (fp8_to_f32 is exact).
struct Decoded {
  double v[256];
  explicit Decoded(DType fp8) {
    for (int c = 0; c < 256; ++c) v[c] = fp8_to_f32(static_cast<uint8_t>(c), fp8);
  }
  double operator[](uint8_t c) const { return v[c]; }
};

// v's FP8 code as the casts round it: the product in f32, then f32_to_fp8.
uint8_t quantize(double v, float scale, DType fp8) { return f32_to_fp8(static_cast<float>(v) * scale, fp8); }

// sum_e a8_e b8_e over HS codes, exact products summed in double.
double dot(const uint8_t* a, const Decoded& da, const uint8_t* b, const Decoded& db, int64_t HS) {
  double d = 0;
  for (int64_t e = 0; e < HS; ++e) d += da[a[e]] * db[b[e]];
  return d;
}

// *amax = fmax(*amax, the per-task maxima), at the statistics type.
template <typename S>
void accumulate_amax(S* amax, const std::vector<double>& task_max) {
  double a = static_cast<double>(*amax);
  for (double m : task_max) a = std::fmax(a, m);
  *amax = static_cast<S>(a);
}

}  // namespace

template <typename S>
void attention_fp8_forward(uint8_t* out, S* lse, const uint8_t* qkv, const Fp8AttentionScalars<S>& sc, int64_t B,
                           int64_t Tn, int64_t NH, int64_t G, int64_t HS) {
  const int64_t W = (NH + 2 * G) * HS, C = NH * HS, group = NH / G;
  const Decoded e4m3(DType::E4M3);
  const double qsi = sc.qkv_scale_inv;
  const double s_descale = qsi * qsi / std::sqrt(static_cast<double>(HS));       // step 1
  const double o_descale = static_cast<double>(sc.s_scale_inv) * qsi;             // step 5
  const float s_scale = static_cast<float>(sc.s_scale), o_scale = static_cast<float>(sc.o_scale);
  // One task per (b, h); the amaxes are reduced over the tasks afterwards.
  std::vector<double> s_max(static_cast<size_t>(B * NH), 0.0), o_max(s_max.size(), 0.0);
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t koff = (NH + h / group) * HS, voff = (NH + G + h / group) * HS;
      std::vector<double> s(static_cast<size_t>(Tn)), o(static_cast<size_t>(HS));
      double sm = 0, om = 0;
      for (int64_t t = 0; t < Tn; ++t) {
        const uint8_t* q = qkv + (b * Tn + t) * W + h * HS;
        double m = -INFINITY;
        for (int64_t j = 0; j <= t; ++j) {
          s[j] = dot(q, e4m3, qkv + (b * Tn + j) * W + koff, e4m3, HS) * s_descale;
          m = std::max(m, s[j]);
        }
        double z = 0;
        for (int64_t j = 0; j <= t; ++j) z += std::exp(s[j] - m);
        const double l = m + std::log(z);
        std::fill(o.begin(), o.end(), 0.0);
        for (int64_t j = 0; j <= t; ++j) {
          const double p = std::exp(s[j] - l);
          sm = std::fmax(sm, p);
          const double p8 = e4m3[quantize(p, s_scale, DType::E4M3)];
          const uint8_t* v = qkv + (b * Tn + j) * W + voff;
          for (int64_t e = 0; e < HS; ++e) o[e] += p8 * e4m3[v[e]];
        }
        uint8_t* ot = out + (b * Tn + t) * C + h * HS;
        for (int64_t e = 0; e < HS; ++e) {
          const double O = o[e] * o_descale;
          om = std::fmax(om, std::fabs(O));
          ot[e] = quantize(O, o_scale, DType::E4M3);
        }
        lse[(b * NH + h) * Tn + t] = static_cast<S>(l);
      }
      s_max[b * NH + h] = sm;
      o_max[b * NH + h] = om;
    }
  }
  accumulate_amax(sc.s_amax, s_max);
  accumulate_amax(sc.o_amax, o_max);
}

template <typename S>
void attention_fp8_backward(uint8_t* dqkv, const uint8_t* dout, const uint8_t* qkv, const uint8_t* out,
                            const S* lse, const Fp8AttentionScalars<S>& sc, DType fmt, int64_t B, int64_t Tn,
                            int64_t NH, int64_t G, int64_t HS) {
  const int64_t W = (NH + 2 * G) * HS, C = NH * HS, group = NH / G;
  const Decoded e4m3(DType::E4M3), g8(fmt);
  const double qsi = sc.qkv_scale_inv, dout_si = sc.dout_scale_inv;
  const double rsqrt = 1.0 / std::sqrt(static_cast<double>(HS));
  const double s_descale = qsi * qsi * rsqrt;                                      // step 1
  const double d_descale = dout_si * static_cast<double>(sc.o_scale_inv);          // step 7
  const double dv_descale = static_cast<double>(sc.s_scale_inv) * dout_si;         // step 9
  const double dp_descale = dout_si * qsi;                                         // step 10
  const double dqk_descale = static_cast<double>(sc.dp_scale_inv) * qsi;           // steps 13, 14
  const float s_scale = static_cast<float>(sc.s_scale), dp_scale = static_cast<float>(sc.dp_scale),
              dqkv_scale = static_cast<float>(sc.dqkv_scale);
  // One task per (b, K/V head): it owns that head's dK, dV and the dQ of its
  // group's query heads, accumulated unscaled and written once.
  std::vector<double> dp_max(static_cast<size_t>(B * G), 0.0), d_max(dp_max.size(), 0.0);
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t g = 0; g < G; ++g) {
      const int64_t koff = (NH + g) * HS, voff = (NH + G + g) * HS;
      std::vector<double> dq(static_cast<size_t>(Tn * HS)), dk(dq.size(), 0.0), dv(dq.size(), 0.0);
      double dpm = 0, dm = 0;
      // Step 15 for one (T, HS) block of unscaled sums into dqkv at column offset col.
      auto store = [&](const std::vector<double>& acc, double descale, int64_t col) {
        for (int64_t t = 0; t < Tn; ++t) {
          uint8_t* row = dqkv + (b * Tn + t) * W + col;
          for (int64_t e = 0; e < HS; ++e) {
            const double d = acc[t * HS + e] * descale;
            dm = std::fmax(dm, std::fabs(d));
            row[e] = quantize(d, dqkv_scale, fmt);
          }
        }
      };
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        std::fill(dq.begin(), dq.end(), 0.0);
        for (int64_t t = 0; t < Tn; ++t) {
          const uint8_t* q = qkv + (b * Tn + t) * W + h * HS;
          const uint8_t* dot_t = dout + (b * Tn + t) * C + h * HS;
          const double D = dot(dot_t, g8, out + (b * Tn + t) * C + h * HS, e4m3, HS) * d_descale;
          const double l = static_cast<double>(lse[(b * NH + h) * Tn + t]);
          for (int64_t j = 0; j <= t; ++j) {
            const uint8_t* k = qkv + (b * Tn + j) * W + koff;
            const uint8_t* v = qkv + (b * Tn + j) * W + voff;
            const double p = std::exp(dot(q, e4m3, k, e4m3, HS) * s_descale - l);
            const double p8 = e4m3[quantize(p, s_scale, DType::E4M3)];
            const double dP = dot(dot_t, g8, v, e4m3, HS) * dp_descale;
            const double dS = (dP - D) * p * rsqrt;
            dpm = std::fmax(dpm, std::fabs(dS));
            const double ds8 = g8[quantize(dS, dp_scale, fmt)];
            double* dqt = &dq[t * HS];
            double* dkj = &dk[j * HS];
            double* dvj = &dv[j * HS];
            for (int64_t e = 0; e < HS; ++e) {
              dvj[e] += p8 * g8[dot_t[e]];
              dqt[e] += ds8 * e4m3[k[e]];
              dkj[e] += ds8 * e4m3[q[e]];
            }
          }
        }
        store(dq, dqk_descale, h * HS);
      }
      store(dk, dqk_descale, koff);
      store(dv, dv_descale, voff);
      dp_max[b * G + g] = dpm;
      d_max[b * G + g] = dm;
    }
  }
  accumulate_amax(sc.dp_amax, dp_max);
  accumulate_amax(sc.dqkv_amax, d_max);
}

#define TRIPOD_FP8_ATTENTION_INSTANTIATE(S)                                                                     \
  template void attention_fp8_forward<S>(uint8_t*, S*, const uint8_t*, const Fp8AttentionScalars<S>&, int64_t, \
                                         int64_t, int64_t, int64_t, int64_t);                                  \
  template void attention_fp8_backward<S>(uint8_t*, const uint8_t*, const uint8_t*, const uint8_t*, const S*,  \
                                          const Fp8AttentionScalars<S>&, DType, int64_t, int64_t, int64_t,     \
                                          int64_t, int64_t);
TRIPOD_FP8_ATTENTION_INSTANTIATE(float)
TRIPOD_FP8_ATTENTION_INSTANTIATE(double)
#undef TRIPOD_FP8_ATTENTION_INSTANTIATE

}  // namespace tripod::backend::cpu
