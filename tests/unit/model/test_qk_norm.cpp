// --qk-layernorm (model/qk_norm.h) on the CPU backend, in f64:
//  - forward against a hand-written norm of each query and key head of the
//    [Q | K | V] rows (RMSNorm and LayerNorm with bias, 4 query heads in 2
//    groups); the value heads come out untouched;
//  - backward against central differences of J = sum(qkv_out * R): d qkv
//    (q and k heads through the norm, v passed through) and the shared
//    weights' (and biases') gradients, summed over heads and tokens;
//  - a tiny Llama model with --qk-layernorm: selective and full
//    recomputation give bit-identical losses and gradients, and the q/k norm
//    weights get non-zero gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "model/gpt_model.h"
#include "model/qk_norm.h"
#include "testing/tiny_model.h"

namespace tripod {
namespace {

constexpr int64_t kN = 5, kNH = 4, kG = 2, kHS = 8, kH = kNH + 2 * kG, kW = kH * kHS;

struct Case {
  bool rms = true;
  config::GptConfig c;
  model::Param qw, qb, kw, kb;
  std::vector<double> x, r;  // qkv input (kN, kW), the objective's weights
};

Tensor f64(const std::vector<double>& v, Shape s) {
  Tensor t = Tensor::empty(s, DType::F64);
  std::memcpy(t.raw(), v.data(), v.size() * 8);
  return t;
}

std::vector<double> rnd(std::mt19937& g, size_t n, double mean, double sd) {
  std::normal_distribution<double> d(mean, sd);
  std::vector<double> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

Case make_case(bool rms) {
  Case k;
  k.rms = rms;
  k.c.hidden_size = kNH * kHS;
  k.c.num_attention_heads = kNH;
  k.c.group_query_attention = true;
  k.c.num_query_groups = kG;
  k.c.normalization = rms ? config::Norm::RMSNorm : config::Norm::LayerNorm;
  k.c.layernorm_epsilon = 1e-5f;
  k.c.qk_layernorm = true;
  std::mt19937 g(rms ? 3 : 4);
  for (model::Param* p : {&k.qw, &k.qb, &k.kw, &k.kb}) {
    const bool weight = p == &k.qw || p == &k.kw;
    p->compute = f64(rnd(g, kHS, weight ? 1.0 : 0.0, 0.3), {kHS});
    p->grad = Tensor::zeros({kHS}, DType::F64);
  }
  k.x = rnd(g, kN * kW, 0.2, 1.0);
  k.r = rnd(g, kN * kW, 0.0, 1.0);
  return k;
}

model::QkNormWeights weights(Case& k) {
  return {&k.qw, k.rms ? nullptr : &k.qb, &k.kw, k.rms ? nullptr : &k.kb};
}

// The forward by hand: every q head (slots 0..NH-1) and k head (NH..NH+G-1) of each token normalised.
std::vector<double> reference(const Case& k, const std::vector<double>& x) {
  std::vector<double> y = x;
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t h = 0; h < kNH + kG; ++h) {
      const double* in = x.data() + n * kW + h * kHS;
      double* out = y.data() + n * kW + h * kHS;
      const model::Param& w = h < kNH ? k.qw : k.kw;
      const model::Param& b = h < kNH ? k.qb : k.kb;
      double mean = 0, sq = 0;
      if (!k.rms)
        for (int64_t i = 0; i < kHS; ++i) mean += in[i] / kHS;
      for (int64_t i = 0; i < kHS; ++i) sq += (in[i] - mean) * (in[i] - mean) / kHS;
      const double rstd = 1.0 / std::sqrt(sq + k.c.layernorm_epsilon);
      for (int64_t i = 0; i < kHS; ++i)
        out[i] = (in[i] - mean) * rstd * w.compute.data<double>()[i] + (k.rms ? 0.0 : b.compute.data<double>()[i]);
    }
  return y;
}

// J = sum(forward(x) * r) through the op.
double objective(backend::Backend& be, Case& k, const std::vector<double>& x, Tensor* out = nullptr) {
  const auto rows = model::QkNormRows::make(be, kN, kNH, kG);
  auto acts = model::QkNormActs::make(be, k.c, kN, kNH, kG, DType::F64);
  Tensor qkv = f64(x, {1, kN, kW}), scratch = be.empty({kN * kW}, DType::F64);
  model::qk_norm_forward(be, k.c, weights(k), rows, qkv, acts, scratch);
  double j = 0;
  for (int64_t i = 0; i < kN * kW; ++i) j += qkv.data<double>()[i] * k.r[static_cast<size_t>(i)];
  if (out) *out = qkv;
  return j;
}

void check_case(bool rms) {
  auto be = backend::make_cpu_backend();
  Case k = make_case(rms);
  Tensor y;
  objective(*be, k, k.x, &y);
  const std::vector<double> want = reference(k, k.x);
  double fwd = 0;
  for (int64_t i = 0; i < kN * kW; ++i) fwd = std::max(fwd, std::fabs(y.data<double>()[i] - want[size_t(i)]));
  EXPECT_LT(fwd, 1e-12) << (rms ? "RMSNorm" : "LayerNorm") << " forward";
  for (int64_t n = 0; n < kN; ++n)  // the v heads untouched, bit for bit
    for (int64_t i = (kNH + kG) * kHS; i < kW; ++i) EXPECT_EQ(y.data<double>()[n * kW + i], k.x[size_t(n * kW + i)]);

  // Backward.
  const auto rows = model::QkNormRows::make(*be, kN, kNH, kG);
  auto acts = model::QkNormActs::make(*be, k.c, kN, kNH, kG, DType::F64);
  Tensor qkv = f64(k.x, {1, kN, kW}), scratch = be->empty({kN * kW}, DType::F64);
  model::qk_norm_forward(*be, k.c, weights(k), rows, qkv, acts, scratch);
  Tensor dqkv = f64(k.r, {1, kN, kW}), dout = be->empty({kN * (kNH + kG) * kHS}, DType::F64);
  model::qk_norm_backward(*be, k.c, weights(k), rows, dqkv, acts, dout, scratch);

  const double h = 1e-6;
  double worst = 0, top = 0;
  for (size_t i = 0; i < k.x.size(); i += 3) {  // every third element: every head kind, every position in a head
    std::vector<double> p = k.x, m = k.x;
    p[i] += h;
    m[i] -= h;
    const double fd = (objective(*be, k, p) - objective(*be, k, m)) / (2 * h);
    worst = std::max(worst, std::fabs(fd - dqkv.data<double>()[i]));
    top = std::max(top, std::fabs(fd));
  }
  EXPECT_LT(worst, 1e-6 * std::max(1.0, top)) << "d qkv";
  std::vector<model::Param*> params{&k.qw, &k.kw};
  if (!rms) params = {&k.qw, &k.qb, &k.kw, &k.kb};
  for (model::Param* prm : params) {
    double pw = 0, pt = 0;
    for (int64_t i = 0; i < kHS; ++i) {
      double& v = prm->compute.data<double>()[i];
      const double keep = v;
      v = keep + h;
      const double jp = objective(*be, k, k.x);
      v = keep - h;
      const double jm = objective(*be, k, k.x);
      v = keep;
      const double fd = (jp - jm) / (2 * h);
      pw = std::max(pw, std::fabs(fd - prm->grad.data<double>()[i]));
      pt = std::max(pt, std::fabs(fd));
    }
    EXPECT_GT(pt, 0.1);
    EXPECT_LT(pw, 1e-6 * std::max(1.0, pt)) << "weight gradient";
  }
}

TEST(QkNorm, RmsNormForwardAndGradientsMatchCentralDifferences) { check_case(true); }
TEST(QkNorm, LayerNormForwardAndGradientsMatchCentralDifferences) { check_case(false); }

// One training micro-batch of a tiny Llama with --qk-layernorm.
std::vector<float> grads_of(model::Recompute rc, std::vector<float>* losses, float* qk_grad) {
  auto be = backend::make_cpu_backend();
  config::GptConfig cfg = testing::tiny_llama({3, 32, 4, 16, 96}, 2, 48);
  cfg.qk_layernorm = true;
  model::StageConfig st;
  st.recompute = rc;
  model::GptModel m(cfg, st, *be);
  m.params().init(42, 0.02f, 3);
  model::MicroBatchActs a = m.make_acts(2, 16);
  for (int64_t i = 0; i < 32; ++i) {
    a.tokens.data<int32_t>()[i] = static_cast<int32_t>((i * 37 + 5) % 96);
    a.targets.data<int32_t>()[i] = static_cast<int32_t>((i * 11 + 3) % 96);
  }
  m.params().zero_grad();
  m.forward(a, true, 1.f / 32, 7);
  m.backward(a, nullptr, 7);
  losses->assign(a.losses.data<float>(), a.losses.data<float>() + a.losses.numel());
  const model::Param& q = m.params().get("decoder.layers.1.self_attention.q_layernorm.weight");
  float sq = 0;
  for (int64_t i = 0; i < q.grad.numel(); ++i) sq += q.grad.data<float>()[i] * q.grad.data<float>()[i];
  *qk_grad = sq;
  const Tensor& g = m.params().grads();
  return std::vector<float>(g.data<float>(), g.data<float>() + g.numel());
}

TEST(QkNorm, LlamaRecomputeIsBitIdentical) {
  std::vector<float> l0, l1, l2;
  float q0 = 0, q1 = 0, q2 = 0;
  const auto g0 = grads_of(model::Recompute::None, &l0, &q0);
  const auto g1 = grads_of(model::Recompute::Selective, &l1, &q1);
  const auto g2 = grads_of(model::Recompute::Full, &l2, &q2);
  EXPECT_GT(q0, 0.f);
  EXPECT_EQ(l0, l1);
  EXPECT_EQ(l0, l2);
  EXPECT_EQ(0, std::memcmp(g0.data(), g1.data(), g0.size() * 4));
  EXPECT_EQ(0, std::memcmp(g0.data(), g2.data(), g0.size() * 4));
}

}  // namespace
}  // namespace tripod
