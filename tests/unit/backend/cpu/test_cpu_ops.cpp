// Every CPU backend op against an independent float64 reference, with fresh
// random inputs per run:
//  - backward ops against central finite differences of the f64 forward
//    (L = sum(out * R) for a random R, so dL/dx = backward(dout = R));
//  - forward ops against direct formulas (softmax CE, causal attention at
//    small sizes, AdamW by hand) or properties (LayerNorm: zero mean, unit
//    variance);
//  - the f32 path against the f64 path.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <utility>

#include "backend/cpu/cpu_backend.h"
#include "testing/tensor_close.h"

namespace tripod {
namespace {

using backend::Backend;

std::mt19937_64& rng() {
  static std::mt19937_64 r(std::random_device{}());
  return r;
}

Tensor randn(const Shape& s, double scale = 1.0, DType dt = DType::F64) {
  Tensor t = Tensor::empty(s, DType::F64);
  std::normal_distribution<double> n(0.0, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = n(rng());
  if (dt == DType::F64) return t;
  Tensor f = Tensor::empty(s, dt);
  backend::make_cpu_backend()->cast(f, t);
  return f;
}

Tensor like(const Tensor& t, DType dt) {
  Tensor o = Tensor::empty(t.shape(), dt);
  backend::make_cpu_backend()->cast(o, t);
  return o;
}

double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += a.data<double>()[i] * b.data<double>()[i];
  return s;
}

// Central-difference check of d(sum(f(x) * R))/dx at every element of x
// (inputs are small) against `analytic`.
void check_grad(const char* what, Tensor& x, const std::function<Tensor()>& f, const Tensor& R,
                const Tensor& analytic, double tol = 1e-6) {
  ASSERT_EQ(x.numel(), analytic.numel());
  const double h = 1e-5;
  double max_err = 0, max_ref = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    double& xi = x.data<double>()[i];
    const double saved = xi;
    xi = saved + h;
    const double lp = dot(f(), R);
    xi = saved - h;
    const double lm = dot(f(), R);
    xi = saved;
    const double fd = (lp - lm) / (2 * h);
    max_err = std::max(max_err, std::abs(fd - analytic.data<double>()[i]));
    max_ref = std::max(max_ref, std::abs(fd));
  }
  EXPECT_LE(max_err, tol * std::max(1.0, max_ref)) << what << ": finite differences disagree (max ref " << max_ref << ")";
}

class CpuOps : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be = backend::make_cpu_backend();
};

TEST_F(CpuOps, MatmulGradients) {
  const int64_t N = 5, C = 7, OC = 3;
  Tensor x = randn({N, C}), w = randn({OC, C}), b = randn({OC}), R = randn({N, OC});
  auto f = [&] { Tensor o = Tensor::empty({N, OC}, DType::F64); be->matmul_forward(o, x, w, &b); return o; };
  // forward against the direct sum
  Tensor o = f();
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < OC; ++j) {
      double s = b.data<double>()[j];
      for (int64_t k = 0; k < C; ++k) s += x.data<double>()[i * C + k] * w.data<double>()[j * C + k];
      EXPECT_NEAR(o.data<double>()[i * OC + j], s, 1e-12);
    }
  Tensor dx = Tensor::empty({N, C}, DType::F64), dw = Tensor::zeros({OC, C}, DType::F64), db = Tensor::zeros({OC}, DType::F64);
  be->matmul_backward(&dx, &dw, &db, R, x, w);
  check_grad("matmul dx", x, f, R, dx);
  check_grad("matmul dw", w, f, R, dw);
  check_grad("matmul db", b, f, R, db);
  // parameter gradients accumulate
  be->matmul_backward(nullptr, &dw, nullptr, R, x, w);
  Tensor dw1 = Tensor::zeros({OC, C}, DType::F64);
  be->matmul_backward(nullptr, &dw1, nullptr, R, x, w);
  for (int64_t i = 0; i < dw.numel(); ++i) EXPECT_NEAR(dw.data<double>()[i], 2 * dw1.data<double>()[i], 1e-12);
}

TEST_F(CpuOps, LayerNormForwardAndGradients) {
  const int64_t N = 4, C = 6;
  Tensor x = randn({N, C}, 2.0), w = randn({C}), b = randn({C}), R = randn({N, C});
  Tensor mean = Tensor::empty({N}, DType::F64), rstd = Tensor::empty({N}, DType::F64);
  auto f = [&] { Tensor o = Tensor::empty({N, C}, DType::F64); be->layernorm_forward(o, mean, rstd, x, w, b, 1e-5f); return o; };
  Tensor ones = Tensor::empty({C}, DType::F64), zeros = Tensor::zeros({C}, DType::F64);
  for (int64_t c = 0; c < C; ++c) ones.data<double>()[c] = 1;
  Tensor n = Tensor::empty({N, C}, DType::F64);
  be->layernorm_forward(n, mean, rstd, x, ones, zeros, 1e-5f);
  for (int64_t i = 0; i < N; ++i) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += n.data<double>()[i * C + c] / C;
    for (int64_t c = 0; c < C; ++c) v += std::pow(n.data<double>()[i * C + c] - m, 2) / C;
    EXPECT_NEAR(m, 0, 1e-12);
    EXPECT_NEAR(v, 1, 1e-4);  // eps in the denominator
  }
  f();
  Tensor dx = Tensor::zeros({N, C}, DType::F64), dw = Tensor::zeros({C}, DType::F64), db = Tensor::zeros({C}, DType::F64);
  be->layernorm_backward(dx, dw, db, R, x, w, mean, rstd);
  check_grad("layernorm dx", x, f, R, dx);
  check_grad("layernorm dw", w, f, R, dw);
  check_grad("layernorm db", b, f, R, db);
}

TEST_F(CpuOps, GeluGradient) {
  const int64_t n = 50;
  Tensor x = randn({n}, 3.0), R = randn({n});
  auto f = [&] { Tensor o = Tensor::empty({n}, DType::F64); be->gelu_forward(o, x); return o; };
  Tensor o = f();
  for (int64_t i = 0; i < n; ++i) {
    const double v = x.data<double>()[i];
    EXPECT_NEAR(o.data<double>()[i], 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))), 1e-12);
  }
  Tensor dx = Tensor::empty({n}, DType::F64);
  be->gelu_backward(dx, x, R);
  check_grad("gelu", x, f, R, dx);
}

TEST_F(CpuOps, AttentionForwardAndGradients) {
  const int64_t B = 2, T = 5, NH = 2, HS = 3, C = NH * HS;
  Tensor qkv = randn({B, T, 3 * C}), R = randn({B, T, C});
  Tensor lse = Tensor::empty({B, NH, T}, DType::F64);
  auto f = [&] { Tensor o = Tensor::empty({B, T, C}, DType::F64); be->attention_forward(o, lse, qkv, NH); return o; };
  Tensor out = f();
  // Direct formula: explicit softmax over j <= t.
  const double* q = qkv.data<double>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> s(static_cast<size_t>(t + 1));
        double z = 0;
        for (int64_t j = 0; j <= t; ++j) {
          double d = 0;
          for (int64_t e = 0; e < HS; ++e) d += q[(b * T + t) * 3 * C + h * HS + e] * q[(b * T + j) * 3 * C + C + h * HS + e];
          s[j] = std::exp(d / std::sqrt(double(HS)));
          z += s[j];
        }
        for (int64_t e = 0; e < HS; ++e) {
          double o = 0;
          for (int64_t j = 0; j <= t; ++j) o += s[j] / z * q[(b * T + j) * 3 * C + 2 * C + h * HS + e];
          EXPECT_NEAR(out.data<double>()[(b * T + t) * C + h * HS + e], o, 1e-12);
        }
        EXPECT_NEAR(lse.data<double>()[(b * NH + h) * T + t], std::log(z), 1e-12);
      }
  Tensor dqkv = Tensor::empty({B, T, 3 * C}, DType::F64);
  be->attention_backward(dqkv, R, qkv, out, lse, NH);
  check_grad("attention dqkv", qkv, f, R, dqkv);
}

TEST_F(CpuOps, VocabParallelCrossEntropyMatchesFullSoftmax) {
  const int64_t N = 6, V = 11;
  Tensor logits = randn({N, V}, 3.0);
  Tensor targets = Tensor::empty({N}, DType::I32);
  for (int64_t i = 0; i < N; ++i) targets.data<int32_t>()[i] = static_cast<int32_t>(rng()() % V);
  Tensor mx = Tensor::empty({N}, DType::F64), sums = Tensor::empty({2, N}, DType::F64), loss = Tensor::empty({N}, DType::F64);
  auto f = [&] {
    be->ce_row_max(mx, logits);
    be->ce_row_sums(sums, logits, mx, targets, 0);
    be->ce_loss(loss, sums, mx);
    return loss;
  };
  f();
  for (int64_t i = 0; i < N; ++i) {
    double z = 0;
    for (int64_t j = 0; j < V; ++j) z += std::exp(logits.data<double>()[i * V + j]);
    EXPECT_NEAR(loss.data<double>()[i], std::log(z) - logits.data<double>()[i * V + targets.data<int32_t>()[i]], 1e-12);
  }
  // Two vocab shards combined by hand as the tp all-reduces would: same loss.
  const int64_t V0 = 5;
  Tensor l0 = Tensor::empty({N, V0}, DType::F64), l1 = Tensor::empty({N, V - V0}, DType::F64);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < V; ++j)
      (j < V0 ? l0.data<double>()[i * V0 + j] : l1.data<double>()[i * (V - V0) + j - V0]) = logits.data<double>()[i * V + j];
  Tensor m0 = Tensor::empty({N}, DType::F64), m1 = Tensor::empty({N}, DType::F64);
  be->ce_row_max(m0, l0);
  be->ce_row_max(m1, l1);
  for (int64_t i = 0; i < N; ++i) m0.data<double>()[i] = std::max(m0.data<double>()[i], m1.data<double>()[i]);
  Tensor s0 = Tensor::empty({2, N}, DType::F64), s1 = Tensor::empty({2, N}, DType::F64), l = Tensor::empty({N}, DType::F64);
  be->ce_row_sums(s0, l0, m0, targets, 0);
  be->ce_row_sums(s1, l1, m0, targets, V0);
  be->add(s0, s0, s1);
  be->ce_loss(l, s0, m0);
  for (int64_t i = 0; i < N; ++i) EXPECT_NEAR(l.data<double>()[i], loss.data<double>()[i], 1e-12);
  // Gradient w.r.t. logits, scaled by dloss.
  const float dloss = 0.25f;
  Tensor dl = Tensor::empty({N, V}, DType::F64), R = Tensor::empty({N}, DType::F64);
  for (int64_t i = 0; i < N; ++i) R.data<double>()[i] = dloss;
  f();
  be->ce_backward(dl, logits, mx, sums, targets, 0, dloss);
  check_grad("cross-entropy dlogits", logits, f, R, dl);
}

TEST_F(CpuOps, EmbeddingVocabRangeAndGradients) {
  const int64_t B = 2, T = 3, C = 4, V = 6;
  Tensor wte = randn({V, C}), wpe = randn({T, C}), R = randn({B, T, C});
  Tensor tokens = Tensor::empty({B, T}, DType::I32);
  const int32_t ids[] = {0, 5, 2, 2, 9, 3};  // 9 lies outside [2, 2+6) and [0, 6)
  std::copy(ids, ids + 6, tokens.data<int32_t>());
  auto f = [&] { Tensor o = Tensor::empty({B, T, C}, DType::F64); be->embedding_forward(o, tokens, wte, &wpe, 2); return o; };
  Tensor o = f();
  // token 0 is outside the shard [2, 8): only the position row
  for (int64_t c = 0; c < C; ++c) EXPECT_EQ(o.data<double>()[c], wpe.data<double>()[c]);
  for (int64_t c = 0; c < C; ++c)  // token 5 -> local row 3, position 1
    EXPECT_EQ(o.data<double>()[C + c], wte.data<double>()[3 * C + c] + wpe.data<double>()[C + c]);
  Tensor dwte = Tensor::zeros({V, C}, DType::F64), dwpe = Tensor::zeros({T, C}, DType::F64);
  be->embedding_backward(&dwte, &dwpe, R, tokens, 2);
  check_grad("embedding dwte", wte, f, R, dwte);
  check_grad("embedding dwpe", wpe, f, R, dwpe);
}

TEST_F(CpuOps, AdamWStepByHand) {
  Tensor p = randn({4}), g = randn({4}), m = randn({4}, 0.1), v = Tensor::empty({4}, DType::F64);
  for (int i = 0; i < 4; ++i) v.data<double>()[i] = 0.01 * (i + 1);
  Tensor p0 = like(p, DType::F64), m0 = like(m, DType::F64), v0 = like(v, DType::F64);
  backend::AdamWStep s{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.5f};
  be->adamw_update(p, g, m, v, s);
  for (int i = 0; i < 4; ++i) {
    const double gi = g.data<double>()[i] * 0.5;
    const double mi = 0.9 * m0.data<double>()[i] + 0.1 * gi;
    const double vi = 0.95 * v0.data<double>()[i] + 0.05 * gi * gi;
    const double upd = (mi / (1 - std::pow(0.9, 3))) / (std::sqrt(vi / (1 - std::pow(0.95, 3))) + 1e-8);
    // hyper-parameters travel as f32 (AdamWStep), hence 1e-7
    EXPECT_NEAR(p.data<double>()[i], p0.data<double>()[i] - 1e-2 * (upd + 0.1 * p0.data<double>()[i]), 1e-7);
  }
}

TEST_F(CpuOps, DropoutMaskIsCounterBasedAndScaled) {
  const int64_t n = 20000;
  Tensor x = Tensor::empty({n}, DType::F64), y = Tensor::empty({n}, DType::F64), z = Tensor::empty({n}, DType::F64);
  for (int64_t i = 0; i < n; ++i) x.data<double>()[i] = 1.0;
  be->dropout_forward(y, x, 0.25f, 42, 1000);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = y.data<double>()[i];
    EXPECT_TRUE(v == 0.0 || std::abs(v - 1.0 / 0.75) < 1e-12);
    kept += v != 0.0;
  }
  EXPECT_NEAR(static_cast<double>(kept) / n, 0.75, 0.02);
  // The same (seed, counter) gives the same mask on a sub-range.
  Tensor ys = y.flat(500, {100}), xs = x.flat(0, {100});
  Tensor zs = z.flat(0, {100});
  be->dropout_forward(zs, xs, 0.25f, 42, 1500);
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(z.data<double>()[i], ys.data<double>()[i]);
}

TEST_F(CpuOps, Float32PathMatchesFloat64) {
  const int64_t B = 2, T = 8, NH = 2, C = 16, N = B * T;
  Tensor qkv = randn({B, T, 3 * C}), dout = randn({B, T, C});
  Tensor o64 = Tensor::empty({B, T, C}, DType::F64), l64 = Tensor::empty({B, NH, T}, DType::F64);
  Tensor o32 = Tensor::empty({B, T, C}, DType::F32), l32 = Tensor::empty({B, NH, T}, DType::F32);
  be->attention_forward(o64, l64, qkv, NH);
  Tensor q32 = like(qkv, DType::F32);
  be->attention_forward(o32, l32, q32, NH);
  testing::expect_close("attention f32", o32.data<float>(), o64.data<double>(), static_cast<size_t>(o64.numel()), 1e-5);
  Tensor d64 = Tensor::empty({B, T, 3 * C}, DType::F64), d32 = Tensor::empty({B, T, 3 * C}, DType::F32);
  be->attention_backward(d64, dout, qkv, o64, l64, NH);
  Tensor dout32 = like(dout, DType::F32);
  be->attention_backward(d32, dout32, q32, o32, l32, NH);
  testing::expect_close("attention backward f32", d32.data<float>(), d64.data<double>(), static_cast<size_t>(d64.numel()), 1e-5);
  Tensor x = randn({N, C}), w = randn({C}), b = randn({C});
  Tensor m64 = Tensor::empty({N}, DType::F64), r64 = Tensor::empty({N}, DType::F64), y64 = Tensor::empty({N, C}, DType::F64);
  Tensor m32 = Tensor::empty({N}, DType::F32), r32 = Tensor::empty({N}, DType::F32), y32 = Tensor::empty({N, C}, DType::F32);
  be->layernorm_forward(y64, m64, r64, x, w, b, 1e-5f);
  Tensor x32 = like(x, DType::F32), w32 = like(w, DType::F32), b32 = like(b, DType::F32);
  be->layernorm_forward(y32, m32, r32, x32, w32, b32, 1e-5f);
  testing::expect_close("layernorm f32", y32.data<float>(), y64.data<double>(), static_cast<size_t>(y64.numel()), 1e-5);
}

TEST_F(CpuOps, CastRoundTripsBf16) {
  Tensor x = Tensor::empty({3}, DType::F32);
  x.data<float>()[0] = 1.0f;
  x.data<float>()[1] = 1.0f + 1.0f / 256;  // halfway between bf16 1 and 1+2^-7: rounds to even (1)
  x.data<float>()[2] = -3.140625f;
  Tensor h = Tensor::empty({3}, DType::BF16), back = Tensor::empty({3}, DType::F32);
  be->cast(h, x);
  be->cast(back, h);
  EXPECT_EQ(back.data<float>()[0], 1.0f);
  EXPECT_EQ(back.data<float>()[1], 1.0f);
  EXPECT_EQ(back.data<float>()[2], -3.140625f);
}

// FP8 GEMMs are native from sm_89 (Ada, Hopper, Blackwell); below it the
// CUDA backend says they run on its fallback kernel (the trainer warns).
// The CPU backend's FP8 is the reference emulation: nothing to say.
TEST(Fp8GemmNote, NativeFromSm89) {
  for (auto [major, minor] : {std::pair{8, 9}, {9, 0}, {10, 0}, {12, 0}})
    EXPECT_EQ(backend::fp8_gemm_limitation(major, minor), "") << major << "." << minor;
  const std::string a100 = backend::fp8_gemm_limitation(8, 0);
  EXPECT_NE(a100.find("sm_80 has no FP8 tensor cores"), std::string::npos) << a100;
  EXPECT_NE(a100.find("fallback kernel"), std::string::npos) << a100;
  EXPECT_NE(backend::fp8_gemm_limitation(8, 6), "");
  EXPECT_NE(backend::fp8_gemm_limitation(7, 0), "");
  EXPECT_EQ(backend::make_cpu_backend()->fp8_gemm_note(), "");
}

// cuDNN's FP8 attention (--fp8-dot-product-attention) serves cuDNN 9.19 or
// later on Hopper (head size 128) and later GPUs (multiples of 16 up to 128);
// the trainer stops before building the model with the reason. The CPU
// backend's emulation serves every head size.
TEST(Fp8AttentionNote, WhatCudnnServes) {
  using backend::fp8_attention_limitation;
  EXPECT_EQ(fp8_attention_limitation(91900, 9, 128), "");
  EXPECT_EQ(fp8_attention_limitation(92000, 10, 64), "");
  EXPECT_NE(fp8_attention_limitation(0, 9, 128).find("no cuDNN 9 is loaded"), std::string::npos);
  const std::string old = fp8_attention_limitation(91400, 9, 128);
  EXPECT_NE(old.find("cuDNN 91400 is loaded: FP8 attention needs cuDNN 9.19 or later"), std::string::npos) << old;
  EXPECT_NE(old.find("LD_LIBRARY_PATH"), std::string::npos) << old;
  EXPECT_NE(fp8_attention_limitation(91900, 8, 128).find("compute capability 8.x"), std::string::npos);
  EXPECT_NE(fp8_attention_limitation(91900, 9, 64).find("head size 64 (cuDNN's FP8 attention on Hopper takes"),
            std::string::npos);
  EXPECT_NE(fp8_attention_limitation(91900, 10, 200).find("multiples of 16 up to 128"), std::string::npos);
  EXPECT_NE(fp8_attention_limitation(91900, 10, 72).find("multiples of 16"), std::string::npos);
  EXPECT_EQ(backend::make_cpu_backend()->fp8_attention_note(64), "");
}

}  // namespace
}  // namespace tripod
