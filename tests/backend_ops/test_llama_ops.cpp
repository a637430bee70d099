// Hand-derived checks of the Llama-family ops on the CPU reference (f64),
// independent of the op harness's f64-vs-f32 comparison:
//  - RoPE against a rotation written as complex multiplication, its
//    backward as the transpose (<dy, R x> = <R^T dy, x>) and the inverse;
//  - grouped-query attention with n_kv_head == n_head identical to the
//    multi-head op, and equal to multi-head attention with each K/V head
//    repeated over its group (dK, dV summed over the group);
//  - RMSNorm and SwiGLU backward against central finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"

namespace tripod {
namespace {

using backend::Backend;
constexpr DType D = DType::F64;

Tensor random(Backend& be, Shape s, uint64_t seed, double scale = 1.0) {
  Tensor t = be.empty(s, D);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0.0, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = n(rng);
  return t;
}
Tensor clone(Backend& be, const Tensor& t) {
  Tensor c = be.empty(t.shape(), t.dtype());
  be.copy(c, t);
  return c;
}
double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += a.data<double>()[i] * b.data<double>()[i];
  return s;
}
double max_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::fabs(a.data<double>()[i] - b.data<double>()[i]));
  return m;
}

// ---- RoPE ----

TEST(Rope, MatchesRotationAsComplexMultiplication) {
  auto be = backend::make_cpu_backend();
  const int64_t B = 2, T = 7, NH = 4, G = 2, HS = 8, rot = 4, h = rot / 2, W = (NH + 2 * G) * HS;
  const double base = 10000.0;
  Tensor x = random(*be, {B, T, W}, 1), y = clone(*be, x);
  be->rope_forward(y, NH, G, rot, float(base));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t head = 0; head < NH + 2 * G; ++head)
        for (int64_t e = 0; e < HS; ++e) {
          const int64_t at = (b * T + t) * W + head * HS;
          double want = x.data<double>()[at + e];
          if (head < NH + G && e < rot) {  // Q and K heads, rotated dims: (x_i + i x_{i+h}) e^{i t theta_i}
            const int64_t i = e % h;
            const double theta = std::pow(base, -2.0 * double(i) / double(rot));
            const std::complex<double> z(x.data<double>()[at + i], x.data<double>()[at + i + h]);
            const std::complex<double> r = z * std::polar(1.0, double(t) * theta);
            want = e < h ? r.real() : r.imag();
          }
          EXPECT_NEAR(y.data<double>()[at + e], want, 1e-12)
              << "b=" << b << " t=" << t << " head=" << head << " e=" << e;
        }
}

TEST(Rope, BackwardIsTheTransposeAndTheInverse) {
  auto be = backend::make_cpu_backend();
  for (int G : {0, 1, 3}) {  // multi-head (n_kv_head 0), multi-query, groups of 2
    const int NH = 6, Gr = G ? G : NH;
    const int64_t B = 2, T = 11, HS = 16, W = (NH + 2 * Gr) * HS;
    for (int64_t rot : {int64_t(16), int64_t(10)}) {
      Tensor x = random(*be, {B, T, W}, 2), dy = random(*be, {B, T, W}, 3);
      Tensor rx = clone(*be, x), rtdy = clone(*be, dy);
      be->rope_forward(rx, NH, G, rot, 500000.f);
      be->rope_backward(rtdy, NH, G, rot, 500000.f);
      EXPECT_NEAR(dot(dy, rx), dot(rtdy, x), 1e-10 * std::sqrt(double(x.numel()))) << "G=" << G << " rot=" << rot;
      // R^T R = I: the backward undoes the forward.
      be->rope_backward(rx, NH, G, rot, 500000.f);
      EXPECT_LT(max_diff(rx, x), 1e-12) << "G=" << G << " rot=" << rot;
    }
  }
}

// ---- grouped-query attention ----

struct Attn {
  Tensor out, lse, dqkv;
};
Attn attend(Backend& be, const Tensor& qkv, const Tensor& dout, int NH, int G) {
  const int64_t B = qkv.size(0), T = qkv.size(1);
  Attn a{be.empty({B, T, dout.size(2)}, D), be.empty({B, NH, T}, D), be.empty(qkv.shape(), D)};
  be.attention_forward(a.out, a.lse, qkv, NH, G);
  be.attention_backward(a.dqkv, dout, qkv, a.out, a.lse, NH, G);
  return a;
}

TEST(GroupedQueryAttention, AllHeadsAsGroupsIsMultiHead) {
  auto be = backend::make_cpu_backend();
  const int NH = 3;
  const int64_t B = 2, T = 13, HS = 8;
  Tensor qkv = random(*be, {B, T, 3 * NH * HS}, 4), dout = random(*be, {B, T, NH * HS}, 5);
  Attn mha = attend(*be, qkv, dout, NH, 0), gqa = attend(*be, qkv, dout, NH, NH);
  EXPECT_EQ(max_diff(mha.out, gqa.out), 0.0);
  EXPECT_EQ(max_diff(mha.lse, gqa.lse), 0.0);
  EXPECT_EQ(max_diff(mha.dqkv, gqa.dqkv), 0.0);
}

TEST(GroupedQueryAttention, EqualsMultiHeadWithRepeatedKeysAndValues) {
  auto be = backend::make_cpu_backend();
  for (int G : {1, 2}) {
    const int NH = 4, group = NH / G;
    const int64_t B = 2, T = 9, HS = 8, Wg = (NH + 2 * G) * HS, Wm = 3 * NH * HS;
    Tensor qkv = random(*be, {B, T, Wg}, 6), dout = random(*be, {B, T, NH * HS}, 7);
    // Multi-head qkv: Q as is, K/V head h = K/V head h / group of the grouped qkv.
    Tensor rep = be->empty({B, T, Wm}, D);
    for (int64_t r = 0; r < B * T; ++r)
      for (int64_t h = 0; h < NH; ++h)
        for (int64_t e = 0; e < HS; ++e) {
          const double* g = qkv.data<double>() + r * Wg;
          double* m = rep.data<double>() + r * Wm;
          m[h * HS + e] = g[h * HS + e];
          m[(NH + h) * HS + e] = g[(NH + h / group) * HS + e];
          m[(2 * NH + h) * HS + e] = g[(NH + G + h / group) * HS + e];
        }
    Attn gqa = attend(*be, qkv, dout, NH, G), mha = attend(*be, rep, dout, NH, 0);
    EXPECT_LT(max_diff(gqa.out, mha.out), 1e-13) << "G=" << G;
    EXPECT_LT(max_diff(gqa.lse, mha.lse), 1e-13) << "G=" << G;
    double worst = 0;
    for (int64_t r = 0; r < B * T; ++r)
      for (int64_t e = 0; e < HS; ++e) {
        const double* dg = gqa.dqkv.data<double>() + r * Wg;
        const double* dm = mha.dqkv.data<double>() + r * Wm;
        for (int64_t h = 0; h < NH; ++h) worst = std::max(worst, std::fabs(dg[h * HS + e] - dm[h * HS + e]));
        for (int64_t g = 0; g < G; ++g) {
          double dk = 0, dv = 0;
          for (int64_t h = g * group; h < (g + 1) * group; ++h) {
            dk += dm[(NH + h) * HS + e];
            dv += dm[(2 * NH + h) * HS + e];
          }
          worst = std::max(worst, std::fabs(dg[(NH + g) * HS + e] - dk));
          worst = std::max(worst, std::fabs(dg[(NH + G + g) * HS + e] - dv));
        }
      }
    EXPECT_LT(worst, 1e-12) << "G=" << G;
  }
}

// ---- RMSNorm and SwiGLU backward against finite differences of L = <dout, f(x)> ----

// Central difference of L with respect to element i of `x` (perturbed in place).
template <typename F>
double numeric_grad(Tensor& x, int64_t i, F loss) {
  const double h = 1e-6, x0 = x.data<double>()[i];
  x.data<double>()[i] = x0 + h;
  const double lp = loss();
  x.data<double>()[i] = x0 - h;
  const double lm = loss();
  x.data<double>()[i] = x0;
  return (lp - lm) / (2 * h);
}

TEST(RmsNorm, BackwardMatchesFiniteDifferences) {
  auto be = backend::make_cpu_backend();
  const int64_t N = 5, C = 12;
  const float eps = 1e-5f;
  Tensor x = random(*be, {N, C}, 8), w = random(*be, {C}, 9), dout = random(*be, {N, C}, 10);
  auto loss = [&] {
    Tensor y = be->empty({N, C}, D), r = be->empty({N}, D);
    be->rmsnorm_forward(y, r, x, w, eps);
    return dot(dout, y);
  };
  // Accumulating outputs start from known values: the op adds to them.
  Tensor dx = random(*be, {N, C}, 11), dw = random(*be, {C}, 12), dx0 = clone(*be, dx), dw0 = clone(*be, dw);
  Tensor y = be->empty({N, C}, D), rstd = be->empty({N}, D);
  be->rmsnorm_forward(y, rstd, x, w, eps);
  for (int64_t i = 0; i < N; ++i) {
    double ms = 0;
    for (int64_t c = 0; c < C; ++c) ms += x.data<double>()[i * C + c] * x.data<double>()[i * C + c];
    EXPECT_NEAR(rstd.data<double>()[i], 1.0 / std::sqrt(ms / C + double(eps)), 1e-12);
  }
  be->rmsnorm_backward(dx, dw, dout, x, w, rstd);
  for (int64_t i = 0; i < N * C; ++i)
    EXPECT_NEAR(dx.data<double>()[i] - dx0.data<double>()[i], numeric_grad(x, i, loss), 1e-6) << "dinp " << i;
  for (int64_t c = 0; c < C; ++c)
    EXPECT_NEAR(dw.data<double>()[c] - dw0.data<double>()[c], numeric_grad(w, c, loss), 1e-6) << "dweight " << c;
}

TEST(Swiglu, ForwardIsSiluGateTimesUpAndBackwardMatchesFiniteDifferences) {
  auto be = backend::make_cpu_backend();
  const int64_t N = 4, F = 6;
  Tensor x = random(*be, {N, 2 * F}, 13, 2.0), dout = random(*be, {N, F}, 14);
  Tensor y = be->empty({N, F}, D);
  be->swiglu_forward(y, x);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < F; ++j) {
      const double g = x.data<double>()[i * 2 * F + j], u = x.data<double>()[i * 2 * F + F + j];
      EXPECT_NEAR(y.data<double>()[i * F + j], g / (1 + std::exp(-g)) * u, 1e-14);
    }
  auto loss = [&] {
    Tensor z = be->empty({N, F}, D);
    be->swiglu_forward(z, x);
    return dot(dout, z);
  };
  Tensor dx = be->empty({N, 2 * F}, D);
  be->swiglu_backward(dx, x, dout);
  for (int64_t i = 0; i < N * 2 * F; ++i) EXPECT_NEAR(dx.data<double>()[i], numeric_grad(x, i, loss), 1e-7) << i;
}

}  // namespace
}  // namespace tripod
