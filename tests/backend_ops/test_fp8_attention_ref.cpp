// FP8 attention's CPU reference (NOTE [FP8 attention] in
// backend/cpu/fp8_attention.cpp) against the f32 attention ops, independent
// of the op harness (which checks the reference against itself in f64):
// random bf16 qkv and dout are cast with fp8_quantize (scale fp8_max /
// amax), the FP8 ops run on the codes, and attention_forward /
// attention_backward run in f32 on the dequantized operands (qkv, dout, and
// the FP8 out that the backward's D reads). The two differ only by the FP8
// roundings of P, dS and the outputs, so every element must lie within the
// bound those roundings allow (Bounds below), weighted by the exact P and dS
// of the dequantized operands; a descale dropped from the call breaks that
// bound by a wide margin. Also: lse equals attention_forward's, the amaxes
// are the max |.| of the exact quantities, and they accumulate.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "tensor/dtype.h"

namespace tripod {
namespace {

using backend::Backend;
using backend::Fp8AttentionMeta;

// Round to nearest in an FP8 format, below saturation: |fp8(x) - x| <=
// rel |x| + sub (half a step: 2^-4 / 2^-3 of the value in the normal range,
// half the smallest subnormal below it).
struct Rounding {
  double rel, sub;
};
Rounding rounding(DType d) {
  return d == DType::E4M3 ? Rounding{std::ldexp(1, -4), std::ldexp(1, -10)}
                          : Rounding{std::ldexp(1, -3), std::ldexp(1, -17)};
}
// The f32 steps around the FP8 ones (dequantized operands, the f32 reference,
// P and dS formed in f32 before their rounding): relative, and absolute in
// units of the quantity's magnitude.
constexpr double kSlack = 1e-5, kF32 = 1e-6;

Tensor f32(Backend& be, const Shape& s) { return be.empty(s, DType::F32); }
Tensor scalar(Backend& be, float v) {
  Tensor t = f32(be, {1});
  t.data<float>()[0] = v;
  return t;
}
float get(const Tensor& t) { return t.data<float>()[0]; }
std::vector<double> values(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }
double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// N(0, sigma) rounded to bf16 (activations as a bf16 model holds them).
Tensor random_bf16(Backend& be, const Shape& s, double sigma, uint64_t seed) {
  Tensor t = f32(be, s);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0.0, sigma);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = bf16_to_f32(f32_to_bf16(static_cast<float>(n(rng))));
  return t;
}

// x cast as current scaling casts it (scale = fp8_max / amax in f32), and
// its dequantized values.
struct Cast {
  Tensor codes, scale_inv, dq;
};
Cast cast(Backend& be, const Tensor& x, DType fp8) {
  const float scale = fp8_max(fp8) / static_cast<float>(max_abs(values(x)));
  Cast c{be.empty(x.shape(), fp8), scalar(be, 1.0f / scale), f32(be, x.shape())};
  Tensor amax = scalar(be, 0);
  be.fp8_quantize(c.codes, amax, x, scalar(be, scale));
  be.fp8_dequantize(c.dq, c.codes, c.scale_inv);
  return c;
}

struct Cfg {
  const char* name;
  int64_t b, t;
  int nh, g;
  int64_t hs;
  DType fmt;     // dout and dqkv
  double sigma;  // of qkv (the softmax sharpens with it)
};
void PrintTo(const Cfg& c, std::ostream* os) { *os << c.name; }

// The exact attention of the dequantized operands (double) and the sums of
// magnitudes each FP8 rounding's error is weighted by:
//   forward (B,T,NH*HS):  pv = sum_j P_ij |V_je|, v1 = sum_j |V_je|   (P8's error in O)
//   backward (B,T,W):     dQ: w = sum_j |dS_ij| |K_je|,       n = sum_j |K_je|
//                         dK: w = sum_{h,i} |dS_ij| |Q_ie|,   n = sum_{h,i} |Q_ie|   (dS8's error)
//                         dV: w = sum_{h,i} P_ij |dout_ie|,   n = sum_{h,i} |dout_ie| (P8's error)
struct Exact {
  double max_p = 0, max_ds = 0;
  std::vector<double> pv, v1, w, n;
};
Exact exact(const Cfg& c, const float* qkv, const float* dout, const float* out) {
  const int64_t B = c.b, T = c.t, NH = c.nh, G = c.g, HS = c.hs, W = (NH + 2 * G) * HS, C = NH * HS;
  const double rs = 1.0 / std::sqrt(static_cast<double>(HS));
  Exact x;
  x.pv.assign(static_cast<size_t>(B * T * C), 0.0);
  x.v1 = x.pv;
  if (dout) x.w.assign(static_cast<size_t>(B * T * W), 0.0), x.n = x.w;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t koff = (NH + h / (NH / G)) * HS, voff = (NH + G + h / (NH / G)) * HS;
      for (int64_t i = 0; i < T; ++i) {
        const float* q = qkv + (b * T + i) * W + h * HS;
        const float* dot = dout ? dout + (b * T + i) * C + h * HS : nullptr;
        std::vector<double> s(static_cast<size_t>(i + 1));
        double m = -INFINITY, z = 0, D = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double d = 0;
          for (int64_t e = 0; e < HS; ++e) d += double(q[e]) * qkv[(b * T + j) * W + koff + e];
          s[j] = d * rs;
          m = std::max(m, s[j]);
        }
        for (int64_t j = 0; j <= i; ++j) z += std::exp(s[j] - m);
        const double lse = m + std::log(z);
        if (dot)
          for (int64_t e = 0; e < HS; ++e) D += double(dot[e]) * out[(b * T + i) * C + h * HS + e];
        for (int64_t j = 0; j <= i; ++j) {
          const double p = std::exp(s[j] - lse);
          x.max_p = std::max(x.max_p, p);
          const float* k = qkv + (b * T + j) * W + koff;
          const float* v = qkv + (b * T + j) * W + voff;
          for (int64_t e = 0; e < HS; ++e) {
            x.pv[(b * T + i) * C + h * HS + e] += p * std::fabs(v[e]);
            x.v1[(b * T + i) * C + h * HS + e] += std::fabs(v[e]);
          }
          if (!dot) continue;
          double dp = 0;
          for (int64_t e = 0; e < HS; ++e) dp += double(dot[e]) * v[e];
          const double ds = p * (dp - D) * rs;
          x.max_ds = std::max(x.max_ds, std::fabs(ds));
          for (int64_t e = 0; e < HS; ++e) {
            const int64_t iq = (b * T + i) * W + h * HS + e, ik = (b * T + j) * W + koff + e,
                          iv = (b * T + j) * W + voff + e;
            x.w[iq] += std::fabs(ds) * std::fabs(k[e]), x.n[iq] += std::fabs(k[e]);
            x.w[ik] += std::fabs(ds) * std::fabs(q[e]), x.n[ik] += std::fabs(q[e]);
            x.w[iv] += p * std::fabs(dot[e]), x.n[iv] += std::fabs(dot[e]);
          }
        }
      }
    }
  return x;
}

// max over the elements of |got - want| / bound (<= 1: within the bound).
double worst(const std::vector<double>& got, const std::vector<double>& want, const std::vector<double>& bound) {
  double r = 0;
  for (size_t k = 0; k < got.size(); ++k) {
    const double e = std::fabs(got[k] - want[k]);
    r = std::max(r, std::isfinite(e) ? e / bound[k] : INFINITY);
  }
  return r;
}

class Fp8Attention : public ::testing::TestWithParam<Cfg> {};

TEST_P(Fp8Attention, MatchesF32AttentionWithinTheFp8Roundings) {
  const Cfg c = GetParam();
  auto be = backend::make_cpu_backend();
  Backend& cpu = *be;
  const int64_t B = c.b, T = c.t, NH = c.nh, HS = c.hs, W = (NH + 2 * c.g) * HS, C = NH * HS;
  const Rounding e4 = rounding(DType::E4M3), f = rounding(c.fmt);
  const float s_scale = 448.0f;

  // ---- forward ----
  const Cast q8 = cast(cpu, random_bf16(cpu, {B, T, W}, c.sigma, 17), DType::E4M3);
  Tensor out_ref = f32(cpu, {B, T, C}), lse_ref = f32(cpu, {B, NH, T});
  cpu.attention_forward(out_ref, lse_ref, q8.dq, c.nh, c.g);
  const std::vector<double> o_ref = values(out_ref);
  const double o_max = max_abs(o_ref);
  const float o_scale = 448.0f / static_cast<float>(o_max);

  Fp8AttentionMeta m;
  m.qkv_scale_inv = q8.scale_inv;
  m.s_scale = scalar(cpu, s_scale);
  m.s_scale_inv = scalar(cpu, 1.0f / s_scale);
  m.s_amax = scalar(cpu, 0);
  m.o_scale = scalar(cpu, o_scale);
  m.o_amax = scalar(cpu, 0);
  Tensor out8 = cpu.empty({B, T, C}, DType::E4M3), lse = f32(cpu, {B, NH, T});
  cpu.attention_fp8_forward(out8, lse, q8.codes, m, c.nh, c.g);
  Tensor out_dq = f32(cpu, {B, T, C});
  cpu.fp8_dequantize(out_dq, out8, scalar(cpu, 1.0f / o_scale));

  // Bounds: O's error from P8 (e_p), then out's own rounding.
  const Exact x = exact(c, q8.dq.data<float>(), nullptr, nullptr);
  std::vector<double> e_p(o_ref.size()), bound(o_ref.size());
  for (size_t i = 0; i < o_ref.size(); ++i) {
    e_p[i] = (1 + kSlack) * (e4.rel * x.pv[i] + e4.sub / s_scale * x.v1[i]) + kF32 * o_max;
    bound[i] = (1 + kSlack) * (e_p[i] + e4.rel * (std::fabs(o_ref[i]) + e_p[i]) + e4.sub / o_scale);
  }
  const std::vector<double> o_got = values(out_dq);
  const double o_worst = worst(o_got, o_ref, bound);
  EXPECT_LE(o_worst, 1.0);
  double o_err = 0;
  for (size_t i = 0; i < o_ref.size(); ++i) o_err = std::max(o_err, std::fabs(o_got[i] - o_ref[i]));
  std::printf("[%s] out: max |err| %.2f%% of its amax, at most %.2f of an element's bound\n", c.name,
              100 * o_err / o_max, o_worst);
  const std::vector<double> l = values(lse), l_ref = values(lse_ref);
  for (size_t i = 0; i < l.size(); ++i) ASSERT_NEAR(l[i], l_ref[i], 1e-5 * std::max(1.0, std::fabs(l_ref[i]))) << i;
  EXPECT_LE(get(m.s_amax), 1.0f);
  EXPECT_EQ(get(m.s_amax), static_cast<float>(x.max_p));
  EXPECT_NEAR(get(m.o_amax), o_max, max_abs(e_p));

  // s_scale_inv dropped (O 448 times too large): far outside the bound.
  {
    Fp8AttentionMeta bad = m;
    bad.s_scale_inv = scalar(cpu, 1);
    bad.s_amax = scalar(cpu, 0);
    bad.o_amax = scalar(cpu, 0);
    Tensor out_bad = cpu.empty({B, T, C}, DType::E4M3), lse_bad = f32(cpu, {B, NH, T}), dq = f32(cpu, {B, T, C});
    cpu.attention_fp8_forward(out_bad, lse_bad, q8.codes, bad, c.nh, c.g);
    cpu.fp8_dequantize(dq, out_bad, scalar(cpu, 1.0f / o_scale));
    const double r = worst(values(dq), o_ref, bound);
    std::printf("[%s] out without s_scale_inv: %.3g times an element's bound\n", c.name, r);
    EXPECT_GE(r, 10.0);
  }
  // The amaxes accumulate: one above the op's maximum stays, one below rises to it.
  {
    const float o_amax = get(m.o_amax);
    Fp8AttentionMeta acc = m;
    acc.s_amax = scalar(cpu, 2.0f);
    acc.o_amax = scalar(cpu, 0.5f * o_amax);
    Tensor out2 = cpu.empty({B, T, C}, DType::E4M3), lse2 = f32(cpu, {B, NH, T});
    cpu.attention_fp8_forward(out2, lse2, q8.codes, acc, c.nh, c.g);
    EXPECT_EQ(get(acc.s_amax), 2.0f);
    EXPECT_EQ(get(acc.o_amax), o_amax);
  }

  // ---- backward ----
  const Cast d8 = cast(cpu, random_bf16(cpu, {B, T, C}, 1e-3, 29), c.fmt);
  Tensor dqkv_ref_t = f32(cpu, {B, T, W});
  cpu.attention_backward(dqkv_ref_t, d8.dq, q8.dq, out_dq, lse_ref, c.nh, c.g);
  const std::vector<double> d_ref = values(dqkv_ref_t);
  const double d_max = max_abs(d_ref);
  const Exact xb = exact(c, q8.dq.data<float>(), d8.dq.data<float>(), out_dq.data<float>());
  const float dp_scale = fp8_max(c.fmt) / static_cast<float>(xb.max_ds);
  const float dqkv_scale = fp8_max(c.fmt) / static_cast<float>(d_max);

  m.o_scale_inv = scalar(cpu, 1.0f / o_scale);
  m.dout_scale_inv = d8.scale_inv;
  m.dp_scale = scalar(cpu, dp_scale);
  m.dp_scale_inv = scalar(cpu, 1.0f / dp_scale);
  m.dp_amax = scalar(cpu, 0);
  m.dqkv_scale = scalar(cpu, dqkv_scale);
  m.dqkv_amax = scalar(cpu, 0);
  Tensor dqkv8 = cpu.empty({B, T, W}, c.fmt);
  cpu.attention_fp8_backward(dqkv8, d8.codes, q8.codes, out8, lse, m, c.nh, c.g);
  Tensor dqkv_dq = f32(cpu, {B, T, W});
  cpu.fp8_dequantize(dqkv_dq, dqkv8, scalar(cpu, 1.0f / dqkv_scale));

  // Bounds: dQ, dK from dS8 (fmt, scale dp_scale), dV from P8 (E4M3, s_scale),
  // then dqkv's own rounding; the f32 term covers dS formed from rounded
  // operands where dP - D cancels.
  std::vector<double> e_d(d_ref.size()), bound_d(d_ref.size());
  for (size_t i = 0; i < d_ref.size(); ++i) {
    const bool dv = static_cast<int64_t>(i) % W >= (NH + c.g) * HS;
    e_d[i] = (1 + kSlack) * (dv ? e4.rel * xb.w[i] + e4.sub / s_scale * xb.n[i]
                                : f.rel * xb.w[i] + f.sub / dp_scale * xb.n[i] + kF32 * xb.max_ds * xb.n[i]) +
             kF32 * d_max;
    bound_d[i] = (1 + kSlack) * (e_d[i] + f.rel * (std::fabs(d_ref[i]) + e_d[i]) + f.sub / dqkv_scale);
  }
  const std::vector<double> d_got = values(dqkv_dq);
  const double d_worst = worst(d_got, d_ref, bound_d);
  EXPECT_LE(d_worst, 1.0);
  double d_err = 0;
  for (size_t i = 0; i < d_ref.size(); ++i) d_err = std::max(d_err, std::fabs(d_got[i] - d_ref[i]));
  std::printf("[%s] dqkv (%s): max |err| %.2f%% of its amax, at most %.2f of an element's bound\n", c.name,
              dtype_name(c.fmt), 100 * d_err / d_max, d_worst);
  EXPECT_NEAR(get(m.dp_amax), xb.max_ds, 1e-5 * xb.max_ds);
  EXPECT_NEAR(get(m.dqkv_amax), d_max, max_abs(e_d));

  // dp_scale_inv dropped (dQ, dK dp_scale times too large): far outside.
  {
    Fp8AttentionMeta bad = m;
    bad.dp_scale_inv = scalar(cpu, 1);
    bad.dp_amax = scalar(cpu, 0);
    bad.dqkv_amax = scalar(cpu, 0);
    Tensor d_bad = cpu.empty({B, T, W}, c.fmt), dq = f32(cpu, {B, T, W});
    cpu.attention_fp8_backward(d_bad, d8.codes, q8.codes, out8, lse, bad, c.nh, c.g);
    cpu.fp8_dequantize(dq, d_bad, scalar(cpu, 1.0f / dqkv_scale));
    const double r = worst(values(dq), d_ref, bound_d);
    std::printf("[%s] dqkv without dp_scale_inv: %.3g times an element's bound\n", c.name, r);
    EXPECT_GE(r, 10.0);
  }
  // Accumulated: dp_amax above the op's maximum stays, dqkv_amax below rises to it.
  {
    const float dqkv_amax = get(m.dqkv_amax);
    Fp8AttentionMeta acc = m;
    acc.dp_amax = scalar(cpu, 2 * get(m.dp_amax));
    acc.dqkv_amax = scalar(cpu, 0.5f * dqkv_amax);
    const float dp_start = get(acc.dp_amax);
    Tensor d2 = cpu.empty({B, T, W}, c.fmt);
    cpu.attention_fp8_backward(d2, d8.codes, q8.codes, out8, lse, acc, c.nh, c.g);
    EXPECT_EQ(get(acc.dp_amax), dp_start);
    EXPECT_EQ(get(acc.dqkv_amax), dqkv_amax);
  }
}

// Head size 128 (the GPU's), multi-head and grouped-query, both formats, and
// a small head with multi-query attention over an odd length.
INSTANTIATE_TEST_SUITE_P(All, Fp8Attention,
                         ::testing::Values(Cfg{"gqa_hs128_hybrid", 1, 64, 4, 2, 128, DType::E5M2, 1.0},
                                           Cfg{"mha_hs128_e4m3", 2, 128, 4, 4, 128, DType::E4M3, 1.5},
                                           Cfg{"mqa_hs16_hybrid", 2, 37, 4, 1, 16, DType::E5M2, 2.0}),
                         [](const ::testing::TestParamInfo<Cfg>& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace tripod
