// The FP8 attention's state (model/fp8_meta.h Fp8Attention,
// --fp8-dot-product-attention): its six metas sit in Fp8State's two groups
// (qkv, s, o with the forward operands, E4M3; dout, dp, dqkv with the
// gradients, E5M2 under hybrid), apart from the linears' and from each
// other, 16-byte aligned, updated by end_iteration and named for the
// checkpoint after Megatron's core_attention module. And at tp 2 (threads
// as ranks), where each rank holds half of the heads, the delayed scales
// after the amax reduction over tp are the single process's bit for bit,
// so every rank casts the codes one process casts: the output, lse and
// dqkv shards are the single process's heads, bit for bit (each head is
// computed alone). Without the tp reduction the scales differ.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "model/fp8_meta.h"
#include "parallel/groups.h"
#include "testing/threads_as_ranks.h"

namespace tripod {
namespace {

using namespace std::chrono_literals;
using model::Fp8Attention;

config::Fp8Config delayed(config::Fp8Format format = config::Fp8Format::Hybrid, int history = 2) {
  config::Fp8Config c;
  c.format = format;
  c.recipe = config::Fp8Recipe::Delayed;
  c.amax_history_len = history;
  c.amax_compute_algo = config::AmaxComputeAlgo::Max;
  return c;
}

float value(const Tensor& t) { return t.data<float>()[0]; }

TEST(Fp8AttentionState, MetasSitInTheGroupsAndAreNamedForTheCheckpoint) {
  auto be = backend::make_cpu_backend();
  model::Param w;
  w.spec.name = "decoder.layers.0.self_attention.linear_qkv.weight";
  w.shape = {4, 4};
  w.value = w.compute = Tensor::zeros(w.shape, DType::F32);
  model::Fp8State st(delayed(), 1, *be, nullptr, nullptr, 2);
  st.add_linear(w);
  Fp8Attention* a0 = st.add_attention("decoder.layers.0.self_attention.core_attention");
  Fp8Attention* a1 = st.add_attention("decoder.layers.1.self_attention.core_attention");
  EXPECT_ANY_THROW(st.add_attention("one too many"));
  EXPECT_EQ(st.num_attentions(), 2);
  // Distinct, 16-byte aligned scales (cuDNN and cuBLASLt read them in place).
  std::set<const void*> scales;
  for (int slot = 0; slot < 3; ++slot) scales.insert(st.meta(0, slot).scale.raw());
  for (const Fp8Attention* a : {a0, a1})
    for (int slot = 0; slot < Fp8Attention::kSlots; ++slot) {
      const model::Fp8TensorMeta& m = a->meta(slot);
      EXPECT_EQ(m.dtype, slot < Fp8Attention::kDout ? DType::E4M3 : DType::E5M2) << Fp8Attention::slot_name(slot);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(m.scale.raw()) % 16, 0u);
      scales.insert(m.scale.raw());
    }
  EXPECT_EQ(scales.size(), 3u + 12u);
  // The backend's view reads the metas' own tensors.
  const backend::Fp8AttentionMeta om = a1->op_meta();
  EXPECT_EQ(om.qkv_scale_inv.raw(), a1->meta(Fp8Attention::kQkv).scale_inv.raw());
  EXPECT_EQ(om.dp_amax.raw(), a1->meta(Fp8Attention::kDp).amax.raw());
  EXPECT_EQ(om.dqkv_scale.raw(), a1->meta(Fp8Attention::kDqkv).scale.raw());
  // end_iteration updates them with the linears': amax 2 gives 448 / 2
  // (E4M3) for qkv, s, o and 57344 / 2 (E5M2) for dout, dp, dqkv.
  st.begin_iteration();
  for (int slot = 0; slot < Fp8Attention::kSlots; ++slot) {
    Tensor amax = a1->meta(slot).amax;
    amax.data<float>()[0] = 2.f;
  }
  st.end_iteration(nullptr);
  for (int slot = 0; slot < Fp8Attention::kSlots; ++slot) {
    EXPECT_EQ(value(a1->meta(slot).scale), slot < Fp8Attention::kDout ? 224.f : 28672.f)
        << Fp8Attention::slot_name(slot);
    EXPECT_EQ(value(a0->meta(slot).scale), 1.f) << "the other attention's " << Fp8Attention::slot_name(slot);
  }
  EXPECT_EQ(value(st.meta(0, 0).scale), 1.f);  // and the linear's
  // Checkpoint names: the linear's 9, then 6 x 3 per attention.
  const auto v = st.state_tensors();
  ASSERT_EQ(v.size(), 9u + 2 * 18u);
  std::map<std::string, int64_t> names;
  for (const auto& [name, t] : v) names[name] = t.numel();
  for (const char* slot : {"qkv", "s", "o", "dout", "dp", "dqkv"})
    for (const char* field : {"scale", "scale_inv", "amax_history"}) {
      const std::string n = std::string("decoder.layers.1.self_attention.core_attention.") + slot + "." + field;
      ASSERT_EQ(names.count(n), 1u) << n;
      EXPECT_EQ(names[n], std::string(field) == "amax_history" ? 2 : 1) << n;
    }
  EXPECT_EQ(names.count("decoder.layers.0.self_attention.linear_qkv.input.scale"), 1u);
  // e4m3: every meta E4M3.
  model::Fp8State e4(delayed(config::Fp8Format::E4M3), 0, *be, nullptr, nullptr, 1);
  EXPECT_EQ(e4.add_attention("a")->meta(Fp8Attention::kDqkv).dtype, DType::E4M3);
  // Current scaling has no FP8 attention (the kernel needs its scales before it runs).
  config::Fp8Config tw = delayed();
  tw.recipe = config::Fp8Recipe::Tensorwise;
  EXPECT_ANY_THROW(model::Fp8State(tw, 0, *be, nullptr, nullptr, 1));
}

constexpr int64_t kB = 2, kT = 8, kNH = 4, kHS = 8;

Tensor randn(const Shape& s, uint64_t seed, float scale = 1.f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n;
  Tensor t = Tensor::empty(s, DType::F32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = scale * n(g);
  return t;
}

// The columns of a (B, T, W) tensor in `ranges` ([first, first + count)), side by side.
Tensor columns(const Tensor& t, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  int64_t w = 0;
  for (const auto& r : ranges) w += r.second;
  const int64_t rows = t.size(0) * t.size(1), W = t.size(2);
  Tensor out = Tensor::empty({t.size(0), t.size(1), w}, DType::F32);
  for (int64_t i = 0; i < rows; ++i) {
    int64_t at = 0;
    for (const auto& [first, count] : ranges) {
      std::memcpy(out.data<float>() + i * w + at, t.data<float>() + i * W + first, size_t(count) * 4);
      at += count;
    }
  }
  return out;
}

// Rank r's heads of a qkv-shaped tensor [Q: NH | K: G | V: G] (head size kHS) at tp.
Tensor qkv_shard(const Tensor& t, int64_t G, int tp, int r) {
  const int64_t q = kNH / tp * kHS, kv = G / tp * kHS;
  return columns(t, {{r * q, q}, {kNH * kHS + r * kv, kv}, {(kNH + G) * kHS + r * kv, kv}});
}

// Rank r's heads of lse (B, NH, T).
Tensor lse_shard(const Tensor& t, int tp, int r) {
  const int64_t nh = kNH / tp;
  Tensor out = Tensor::empty({kB, nh, kT}, DType::F32);
  for (int64_t b = 0; b < kB; ++b)
    std::memcpy(out.data<float>() + b * nh * kT, t.data<float>() + (b * kNH + r * nh) * kT, size_t(nh * kT) * 4);
  return out;
}

struct AttentionRun {
  Tensor att, lse, dqkv;
  std::map<std::string, std::vector<float>> state;
};

// Two iterations (the second with the scales the first's amaxes gave) of
// one FP8 attention with G K/V heads on rank r of tp.
AttentionRun run_attention(int64_t G, int tp, int r, comm::Communicator* group) {
  auto be = backend::make_cpu_backend();
  model::Fp8State st(delayed(), 0, *be, group, nullptr, 1);
  const Fp8Attention* a = st.add_attention("decoder.layers.0.self_attention.core_attention");
  const int nh = static_cast<int>(kNH / tp), g = G == kNH ? 0 : static_cast<int>(G / tp);
  AttentionRun o;
  for (int it = 0; it < 2; ++it) {
    st.begin_iteration();
    const Tensor qkv = qkv_shard(randn({kB, kT, (kNH + 2 * G) * kHS}, 10 + it), G, tp, r);
    const Tensor datt = columns(randn({kB, kT, kNH * kHS}, 20 + it, 0.1f), {{r * nh * kHS, nh * kHS}});
    Tensor qkv8 = be->empty(qkv.shape(), DType::E4M3), att8 = be->empty(datt.shape(), DType::E4M3);
    o.att = Tensor::zeros(datt.shape(), DType::F32);
    o.lse = Tensor::zeros({kB, nh, kT}, DType::F32);
    o.dqkv = Tensor::zeros(qkv.shape(), DType::F32);
    a->forward(o.att, o.lse, qkv8, att8, qkv, nh, g);
    a->backward(o.dqkv, datt, qkv8, att8, o.lse, nh, g);
    st.end_iteration(nullptr);
  }
  for (auto& [name, t] : st.state_tensors()) o.state[name] = {t.data<float>(), t.data<float>() + t.numel()};
  return o;
}

void expect_same(const char* what, const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  EXPECT_EQ(0, std::memcmp(got.raw(), want.raw(), size_t(got.numel()) * 4)) << what;
}

void check_tp(int64_t G) {
  const int tp = 2;
  const AttentionRun ref = run_attention(G, 1, 0, nullptr);
  for (const auto& [name, v] : ref.state)
    if (name.ends_with("amax_history")) EXPECT_GT(v[0], 0.f) << name;
  testing::run_ranks(tp, 30s, [&](int r, comm::DistContext& ctx) {
    auto pg = parallel::make_process_groups(ctx, parallel::Layout::make(tp, tp, 1));
    const AttentionRun o = run_attention(G, tp, r, pg.tp.get());
    ASSERT_EQ(o.state.size(), ref.state.size());
    for (const auto& [name, v] : ref.state) EXPECT_EQ(o.state.at(name), v) << name << " on tp rank " << r;
    expect_same("att", o.att, columns(ref.att, {{r * kNH / tp * kHS, kNH / tp * kHS}}));
    expect_same("lse", o.lse, lse_shard(ref.lse, tp, r));
    expect_same("dqkv", o.dqkv, qkv_shard(ref.dqkv, G, tp, r));
  });
}

TEST(Fp8AttentionTp, DelayedScalesMatchOneProcess) { check_tp(kNH); }
TEST(Fp8AttentionTp, DelayedScalesMatchOneProcessGroupedQuery) { check_tp(2); }

}  // namespace
}  // namespace tripod
