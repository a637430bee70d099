// The FP8 parameter all-gather (distributed/fp8_param_gather.h, NOTE [FP8
// parameter all-gather]) on 2 threads-as-ranks with the distributed
// optimizer's layout (buckets whose sizes are not multiples of dp, weights
// cut between the ranks' pieces):
//  - tensorwise: every rank ends with the codes of casting the whole fp32
//    weight with scale = 448 / (its whole amax), computed here on the host
//    from the full values with tensor/dtype.h's conversion, and that scale;
//  - delayed: the codes of the whole weight with the scale it had, and the
//    parts' amaxes, max-reduced over dp, are the whole weight's amax;
//  - the all-gathers move 1 byte per element (the flight recorder's byte
//    counts of the collectives the gather ran).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "base/error.h"
#include "comm/local_communicator.h"
#include "distributed/fp8_param_gather.h"
#include "testing/threads_as_ranks.h"

namespace tripod {
namespace {

using distributed::Fp8ParamGather;
using distributed::ParamAndGradBuffer;

void run_case(config::Fp8Recipe recipe) {
  using namespace std::chrono_literals;
  // Two weights (6x5 and 4x9) with a bias and a norm between them; 76
  // elements; bucket size 20 makes two buckets of odd sizes, each weight
  // cut between the two ranks' pieces.
  struct P { const char* name; Shape shape; bool weight; };
  const std::vector<P> ps = {{"w0", {6, 5}, true}, {"b0", {7}, false}, {"w1", {4, 9}, true}, {"n", {3}, false}};
  testing::run_ranks(2, 20s, [&](int rank, comm::DistContext& ctx) {
    auto be = backend::make_cpu_backend();
    std::vector<model::ParamSpec> specs;
    for (const P& p : ps)
      specs.push_back({p.name, p.shape, model::ShardDim::None, model::InitKind::Zeros, p.weight, -1});
    model::ParamStore store(std::move(specs), 1, 0, *be, 2);
    auto dp = ctx.world();
    ParamAndGradBuffer gb(store, *dp, *be, 20, true, std::vector<bool>(ps.size(), false));
    ASSERT_EQ(gb.buckets().size(), 2u);  // [w0 b0] (37: pieces of 19) and [w1 n] (39: 20)
    float* v = store.values().data<float>();
    for (int64_t i = 0; i < store.padded_numel(); ++i)  // magnitudes over several binades, both signs
      v[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i)) * std::exp2(static_cast<double>(i % 11) - 4));
    Tensor shard = Tensor::zeros({gb.shard_numel()}, DType::F32);
    gb.take_shard(shard, store.values());

    config::Fp8Config cfg;
    cfg.format = config::Fp8Format::Hybrid;
    cfg.recipe = recipe;
    const float start_scale = 2.f;
    std::vector<model::Fp8TensorMeta> metas(2);
    for (auto& m : metas) {
      m.scale = Tensor::zeros({1}, DType::F32);
      m.scale_inv = Tensor::zeros({1}, DType::F32);
      m.scale.data<float>()[0] = start_scale;
      m.scale_inv.data<float>()[0] = 1.f / start_scale;
      m.amax = Tensor::zeros({1}, DType::F32);
      m.dtype = DType::E4M3;
    }
    Fp8ParamGather fg(gb, *be, cfg, {{0, &metas[0]}, {2, &metas[1]}}, nullptr);

    const size_t before = ctx.recorder()->entries().size();
    fg.gather(shard);
    // 1 byte per element: each rank's all-gathers carry its parts of the
    // weights, packed to the longest rank's (the recorder counts the bytes
    // a rank puts in), where the f32 gather carries four per element. By
    // hand: bucket [w0 b0] (pieces [0, 19) and [19, 38)): w0's 19 and 11
    // elements; bucket [w1 n] (pieces [37, 57) and [57, 77)): w1's 20 and 16.
    size_t gathered = 0;
    const auto entries = ctx.recorder()->entries();
    for (size_t e = before; e < entries.size(); ++e)
      if (entries[e].op == "all_gather") gathered += entries[e].bytes;
    EXPECT_EQ(gathered, 19u + 20u) << ctx.recorder()->dump();
    EXPECT_EQ(fg.gathered_bytes(), 19 + 20);
    EXPECT_EQ(fg.buffer_bytes(), 256 + 256);  // each weight's codes, 256-byte aligned, one per bucket

    for (size_t k = 0; k < 2; ++k) {
      const model::Param& p = store.params()[k == 0 ? 0 : 2];
      const int64_t n = shape_numel(p.shape);
      float amax = 0.f;
      for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(v[p.offset + i]));
      model::Fp8TensorMeta& m = metas[k];
      float scale = start_scale;
      if (recipe == config::Fp8Recipe::Tensorwise) {
        scale = 448.f / amax;
        EXPECT_EQ(m.scale.data<float>()[0], scale) << p.spec.name;
        EXPECT_EQ(m.scale_inv.data<float>()[0], 1.f / scale) << p.spec.name;
      } else {
        EXPECT_EQ(m.scale.data<float>()[0], start_scale);  // delayed: the scale as it stands
        comm::AllReduceOptions o;
        o.op = comm::ReduceOp::Max;
        dp->all_reduce(m.amax, o)->wait();  // what Fp8State::end_iteration does over dp
      }
      EXPECT_EQ(m.amax.data<float>()[0], amax) << p.spec.name;
      const Tensor c = fg.codes(k);
      ASSERT_EQ(c.dtype(), DType::E4M3);
      ASSERT_EQ(c.numel(), n);
      int64_t nonzero = 0;
      for (int64_t i = 0; i < n; ++i) {
        const uint8_t want = f32_to_fp8(v[p.offset + i] * scale, DType::E4M3);
        EXPECT_EQ(static_cast<const uint8_t*>(c.raw())[i], want) << p.spec.name << " element " << i << " rank " << rank;
        nonzero += want != 0;
      }
      EXPECT_GT(nonzero, n / 2);
    }
  });
}

TEST(Fp8ParamGather, TensorwiseCastsEachWeightWithItsWholeAmaxOneBytePerElement) {
  run_case(config::Fp8Recipe::Tensorwise);
}

TEST(Fp8ParamGather, DelayedCastsWithTheScaleAsItStands) { run_case(config::Fp8Recipe::Delayed); }

// What --fp8-param-gather changes against the plain FP8 path under --bf16:
// the plain path casts the bf16 compute copy (master -> bf16 -> FP8, with
// the amax of the bf16 values), the gather casts the fp32 master (master
// -> FP8, the amax of the fp32 values). Both round the same value v: the
// scaled operands v * s and bf16(v) * s' differ by at most 2^-8 relative
// (bf16 keeps 8 bits: 2^-9 from bf16(v), 2^-9 from bf16(amax) in s'), less
// than one E4M3 step (at least 2^-4 of the value: 3 mantissa bits), so the
// two codes are equal or adjacent: at most one code step apart, the same
// sign. The amax element itself maps to 448 in both. Some codes do differ
// (the bound is not vacuous), most do not.
TEST(Fp8ParamGather, ShardCastIsTheBf16PathsCodeOrTheNextOne) {
  using namespace std::chrono_literals;
  testing::run_ranks(2, 20s, [&](int rank, comm::DistContext& ctx) {
    auto be = backend::make_cpu_backend();
    model::ParamStore store({{"w", {40, 50}, model::ShardDim::None, model::InitKind::Zeros, true, -1},
                             {"b", {40}, model::ShardDim::None, model::InitKind::Zeros, false, -1}},
                            1, 0, *be, 2);
    auto dp = ctx.world();
    ParamAndGradBuffer gb(store, *dp, *be, 0, true, {false, false});
    float* v = store.values().data<float>();
    for (int64_t i = 0; i < store.padded_numel(); ++i)  // generic fp32 values over several binades
      v[i] = static_cast<float>(std::sin(1.3 * static_cast<double>(i) + 0.1) * std::exp2(static_cast<double>(i % 13) - 6));
    Tensor shard = Tensor::zeros({gb.shard_numel()}, DType::F32);
    gb.take_shard(shard, store.values());
    config::Fp8Config cfg;
    cfg.format = config::Fp8Format::Hybrid;
    cfg.recipe = config::Fp8Recipe::Tensorwise;
    model::Fp8TensorMeta m;
    m.scale = Tensor::zeros({1}, DType::F32);
    m.scale_inv = Tensor::zeros({1}, DType::F32);
    m.amax = Tensor::zeros({1}, DType::F32);
    Fp8ParamGather fg(gb, *be, cfg, {{0, &m}}, nullptr);
    fg.gather(shard);

    const int64_t n = 40 * 50;
    auto bf16 = [](float x) { return bf16_to_f32(f32_to_bf16(x)); };
    float amax = 0.f;
    for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(bf16(v[i])));
    const float scale = 448.f / amax;  // the plain path's scale (Fp8State::quantize of the bf16 copy)
    const auto* got = static_cast<const uint8_t*>(fg.codes(0).raw());
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t plain = f32_to_fp8(bf16(v[i]) * scale, DType::E4M3);
      const int mag_a = got[i] & 0x7f, mag_b = plain & 0x7f;
      EXPECT_LE(std::abs(mag_a - mag_b), 1) << "element " << i << " rank " << rank;
      if (mag_a != 0 && mag_b != 0) EXPECT_EQ(got[i] & 0x80, plain & 0x80) << "element " << i;
      differ += got[i] != plain;
    }
    EXPECT_GT(differ, 0);
    EXPECT_LT(differ, n / 10);
  });
}

TEST(Fp8ParamGather, RefusesWithoutTheDistributedOptimizerOrFp8) {
  auto be = backend::make_cpu_backend();
  comm::LocalCommunicator one{"dp"};
  model::ParamStore store({{"w", {2, 2}, model::ShardDim::None, model::InitKind::Zeros, true, -1}}, 1, 0, *be);
  config::Fp8Config fp8;
  fp8.format = config::Fp8Format::Hybrid;
  ParamAndGradBuffer plain(store, one, *be, 0, false, {false});
  try {
    Fp8ParamGather g(plain, *be, fp8, {}, nullptr);
    FAIL() << "no error without the distributed optimizer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--use-distributed-optimizer"), std::string::npos) << e.what();
  }
  ParamAndGradBuffer dist(store, one, *be, 0, true, {false});
  try {
    Fp8ParamGather g(dist, *be, config::Fp8Config{}, {}, nullptr);
    FAIL() << "no error without FP8";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--fp8-format hybrid"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tripod
