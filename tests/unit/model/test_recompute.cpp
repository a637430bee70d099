// Activation recomputation (model/stage_config.h, Recompute;
// TransformerLayer::recompute) on the CPU backend: one training micro-batch
// with and without --recompute-activations / --recompute-granularity full
// gives bit-identical losses and parameter gradients (the recomputed
// forward runs the same ops on the same inputs, dropout included), and the
// activation bytes kept per micro-batch drop by exactly the tensors that
// recompute does not store (counted by hand).
#include <gtest/gtest.h>

#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "model/gpt_model.h"
#include "testing/tiny_model.h"

namespace tripod {
namespace {

constexpr int64_t kB = 2, kT = 16, kL = 3, kC = 32, kNH = 4, kV = 96;

struct Result {
  std::vector<float> losses, grads;
  size_t act_bytes = 0;
};

Result run(model::Recompute rc, bool llama = false) {
  auto be = backend::make_cpu_backend();
  const testing::TinyShape shape{kL, kC, kNH, kT, kV};
  // Llama: RoPE and RMSNorm rerun in the recomputed forward; grouped heads, SwiGLU.
  config::GptConfig cfg = llama ? testing::tiny_llama(shape, 2, 48) : testing::tiny_gpt(shape);
  cfg.hidden_dropout = 0.1f;  // the recomputed forward must draw the same masks
  model::StageConfig st;
  st.recompute = rc;
  model::GptModel m(cfg, st, *be);
  m.params().init(42, 0.02f, kL);
  model::MicroBatchActs a = m.make_acts(kB, kT);
  for (int64_t i = 0; i < kB * kT; ++i) {
    a.tokens.data<int32_t>()[i] = static_cast<int32_t>((i * 37 + 5) % kV);
    a.targets.data<int32_t>()[i] = static_cast<int32_t>((i * 11 + 3) % kV);
  }
  const uint64_t seed = 777;
  m.params().zero_grad();
  m.forward(a, true, 1.f / (kB * kT), seed);
  m.backward(a, nullptr, seed);
  Result r;
  r.act_bytes = a.bytes();
  r.losses.assign(a.losses.data<float>(), a.losses.data<float>() + a.losses.numel());
  const Tensor& g = m.params().grads();
  r.grads.assign(g.data<float>(), g.data<float>() + g.numel());
  return r;
}

void expect_identical(const Result& a, const Result& b, const char* what) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  ASSERT_EQ(a.grads.size(), b.grads.size());
  EXPECT_EQ(0, std::memcmp(a.losses.data(), b.losses.data(), a.losses.size() * 4)) << what << ": losses differ";
  EXPECT_EQ(0, std::memcmp(a.grads.data(), b.grads.data(), a.grads.size() * 4)) << what << ": gradients differ";
}

TEST(Recompute, SelectiveAndFullGiveIdenticalLossesAndGradients) {
  const Result none = run(model::Recompute::None);
  const Result sel = run(model::Recompute::Selective);
  const Result full = run(model::Recompute::Full);
  // Sanity: the gradients are not trivially zero.
  double sq = 0;
  for (float g : none.grads) sq += double(g) * g;
  ASSERT_GT(sq, 0.0);
  expect_identical(none, sel, "selective");
  expect_identical(none, full, "full");
}

TEST(Recompute, LlamaFamilySelectiveAndFullAreBitIdentical) {
  const Result none = run(model::Recompute::None, true);
  double sq = 0;
  for (float g : none.grads) sq += double(g) * g;
  ASSERT_GT(sq, 0.0);
  expect_identical(none, run(model::Recompute::Selective, true), "llama selective");
  expect_identical(none, run(model::Recompute::Full, true), "llama full");
}

TEST(Recompute, ActivationBytesDropByTheTensorsNotKept) {
  const Result none = run(model::Recompute::None);
  const Result sel = run(model::Recompute::Selective);
  const Result full = run(model::Recompute::Full);
  const size_t N = kB * kT, F = 4 * kC, f = sizeof(float);
  // Per layer, stored without recompute (f32): res1, out (N,C); qkv (N,3C);
  // att (N,C); fc1, gelu (N,F); 4 LayerNorm statistics (N); lse (B,NH,T) =
  // B*NH*T values. (LayerNorm outputs are workspace.)
  const size_t per_layer = (2 * N * kC + 3 * N * kC + N * kC + 2 * N * F + 4 * N + kB * kNH * kT) * f;
  const size_t head = (N * kC /*input*/ + N * kC /*lnf*/ + 2 * N /*stats*/ + N /*losses*/ + N * kC /*dlnf*/) * f;
  EXPECT_EQ(none.act_bytes, kL * per_layer + head);
  // Selective: att and lse not kept.
  EXPECT_EQ(none.act_bytes - sel.act_bytes, kL * (N * kC + kB * kNH * kT) * f);
  // Full: only each layer's output is kept.
  EXPECT_EQ(full.act_bytes, kL * N * kC * f + head);
  EXPECT_LT(full.act_bytes, sel.act_bytes);
}

}  // namespace
}  // namespace tripod
