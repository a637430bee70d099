// ZeRO-2 and ZeRO-3 (docs/zero.md) on 2 threads-as-ranks (Gloo, CPU
// backend), driven through the model's ParamGatherer seam as the trainer
// does: a recorded trace of the calls and of the all-gathers shows that
// with --overlap-param-gather the gather of layer l+1 is launched before
// layer l's forward is done and waited for only after it (and that of
// layer l-1 launched before layer l's backward is done), and not without it; the full-size gradients and parameters bound at
// any time stay a few layers' worth, not the model's; the parameters at rest
// are shards only; and a step gives the same weights as the distributed
// optimizer (ZeRO-1) on the same micro-batches, within rounding (another
// summation order, NOTE [Sharded gradients]).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "tensor/allocator.h"
#include "distributed/distributed_data_parallel.h"
#include "distributed/distributed_optimizer.h"
#include "model/gpt_model.h"
#include "parallel/groups.h"
#include "testing/threads_as_ranks.h"
#include "testing/tiny_model.h"

namespace tripod {
namespace {

using distributed::DistributedDataParallel;
using distributed::DistributedDataParallelConfig;
using distributed::DistributedOptimizer;
using distributed::ShardingStrategy;
using Pass = model::ParamGatherer::Pass;

// Records every call, then delegates; also the largest full-size
// gradient and parameter footprint seen at any call.
struct RecordingGatherer final : model::ParamGatherer {
  model::ParamGatherer* inner = nullptr;
  distributed::ParamAndGradBuffer* buf = nullptr;
  std::vector<std::string>* trace = nullptr;
  int64_t max_grads = 0, max_params = 0;
  void note() {
    max_grads = std::max(max_grads, buf->bound_grad_numel());
    max_params = std::max(max_params, buf->gathered_numel());
  }
  void before(int g, Pass p) override {
    trace->push_back((p == Pass::Forward ? "F" : "B") + std::to_string(g));
    inner->before(g, p);
    note();
  }
  void after(int g, Pass p) override {
    note();
    trace->push_back((p == Pass::Forward ? "f" : "b") + std::to_string(g));
    inner->after(g, p);
  }
  void grads_written(int g) override {
    inner->grads_written(g);
    note();
  }
};

const config::GptConfig& cfg() {
  static const config::GptConfig c = testing::tiny_gpt(
      {.num_layers = 4, .hidden_size = 32, .num_attention_heads = 4, .seq_length = 16, .vocab_size = 96});
  return c;
}

struct RankResult {
  std::vector<std::string> trace;  // gatherer calls; all-gather launches "S<bucket>", waits "W<bucket>"
  std::vector<float> values;       // the whole parameters after the step
  double grad_norm = 0;
  int64_t max_grads = 0, max_params = 0, padded = 0;
  size_t peak_bytes = 0;  // the CPU allocator's bytes in use (both ranks) at its highest sample
  bool flat_values_at_rest = true, flat_grads_at_rest = true;
};

// One optimizer step over M micro-batches on dp rank `rank` of kDp, the
// shards within `instances` distributed-optimizer instances.
RankResult run(int rank, comm::DistContext& ctx, ShardingStrategy s, bool prefetch, int kDp = 2, int instances = 1) {
  constexpr int M = 3;
  auto be = backend::make_cpu_backend();
  auto groups = parallel::make_process_groups(ctx, parallel::Layout::make(kDp, 1, 1, 1));
  parallel::make_distributed_optimizer_instance_groups(ctx, groups, instances);
  model::StageConfig st;
  st.param_buffer_pad = kDp;
  model::GptModel m(cfg(), st, *be);
  m.params().init(5, 0.02f, cfg().num_layers);
  DistributedDataParallelConfig dc;
  dc.sharding = s;
  dc.use_distributed_optimizer = true;
  dc.overlap_grad_reduce = true;
  dc.overlap_param_gather = prefetch;
  dc.bucket_size = s == ShardingStrategy::Optim ? 10000 : 0;
  dc.num_distributed_optimizer_instances = instances;
  DistributedDataParallel ddp({&m}, groups, *be, dc);
  DistributedOptimizer opt(ddp, groups, *be, optim::AdamWConfig{});
  RankResult r;
  r.padded = m.params().padded_numel();
  auto& buf = ddp.buffer(0);
  RecordingGatherer rec;
  rec.buf = &buf;
  rec.trace = &r.trace;
  rec.inner = ddp.param_gatherer(0);
  if (rec.inner) m.set_param_gatherer(&rec);
  buf.on_gather = [&](int b, int what) {
    if (what == 0) r.trace.push_back("S" + std::to_string(b));
    if (what == 1) r.trace.push_back("W" + std::to_string(b));
  };
  r.flat_values_at_rest = m.params().has_flat_values();
  r.flat_grads_at_rest = m.params().has_flat_grads();

  auto sample = [&] { r.peak_bytes = std::max(r.peak_bytes, allocator_for(DeviceType::CPU).bytes_in_use()); };
  ddp.zero_grad_buffer();
  const int64_t B = 2, T = cfg().seq_length;
  model::MicroBatchActs acts = m.make_acts(B, T);
  for (int mb = 0; mb < M; ++mb) {
    acts.sample_offset = (rank * M + mb) * B;
    for (int64_t i = 0; i < B * T; ++i) {
      acts.tokens.data<int32_t>()[i] = static_cast<int32_t>((i * 7 + mb * 13 + rank * 29) % cfg().vocab_size);
      acts.targets.data<int32_t>()[i] = static_cast<int32_t>((i * 11 + mb * 5 + rank * 3) % cfg().vocab_size);
    }
    // The DDP's own hooks as the pipeline stage passes them (ZeRO-1 only).
    const auto use = ddp.param_use_hook(), ready = ddp.grad_ready_hook();
    const model::GptModel::ParamHook use_c = use ? [&](const std::vector<size_t>& p) { use(0, p); }
                                                 : model::GptModel::ParamHook{};
    const model::GptModel::ParamHook ready_c = ready && mb == M - 1
                                                   ? [&](const std::vector<size_t>& p) { ready(0, p); }
                                                   : model::GptModel::ParamHook{};
    m.forward(acts, true, 1.f / (M * kDp * B * T), 9, &use_c);
    sample();
    m.backward(acts, nullptr, 9, &ready_c);
    sample();
  }
  rec.note();
  opt.reduce_grads();
  r.grad_norm = opt.get_grad_norm();
  opt.step(1e-3, 1.f);
  sample();
  r.max_grads = rec.max_grads;
  r.max_params = rec.max_params;

  ddp.finish_param_sync();
  ddp.materialize_params();
  const Tensor& v = m.params().values();
  r.values.assign(v.data<float>(), v.data<float>() + v.numel());
  return r;
}

std::vector<RankResult> run_dp4(ShardingStrategy s, int instances) {
  std::vector<RankResult> out(4);
  testing::run_ranks(4, std::chrono::seconds(60), [&](int rank, comm::DistContext& ctx) {
    out[static_cast<size_t>(rank)] = run(rank, ctx, s, true, 4, instances);
  });
  return out;
}

std::vector<RankResult> run_dp2(ShardingStrategy s, bool prefetch) {
  std::vector<RankResult> out(2);
  testing::run_ranks(2, std::chrono::seconds(60), [&](int rank, comm::DistContext& ctx) {
    out[static_cast<size_t>(rank)] = run(rank, ctx, s, prefetch);
  });
  return out;
}

// Index of the first entry equal to e at or after `from` (trace.size() if none).
size_t find(const std::vector<std::string>& t, const std::string& e, size_t from = 0) {
  auto it = std::find(t.begin() + static_cast<std::ptrdiff_t>(from), t.end(), e);
  return static_cast<size_t>(it - t.begin());
}

TEST(ShardedDataParallel, Zero3PrefetchesTheNextLayerDuringThisOne) {
  for (bool prefetch : {true, false}) {
    const auto res = run_dp2(ShardingStrategy::OptimGradsParams, prefetch);
    const auto& t = res[0].trace;
    // Groups: 0 embedding, 1..4 layers, 5 head; ZeRO-3 buckets are one per
    // group here (no --ddp-bucket-size), in launch order: bucket 5 - g.
    auto bucket_of = [](int g) { return "S" + std::to_string(5 - g); };
    size_t checked = 0;
    for (int l = 1; l <= 3; ++l) {  // forward of layer group l, first micro-batch
      const size_t begin = find(t, "F" + std::to_string(l)), end = find(t, "f" + std::to_string(l), begin);
      ASSERT_LT(end, t.size());
      const size_t start_next = find(t, bucket_of(l + 1), begin);
      if (prefetch) {
        EXPECT_LT(start_next, end) << "forward: the gather of group " << l + 1 << " is not in flight during group " << l;
        // ... and nobody waits for it before layer l's compute is done.
        EXPECT_GT(find(t, "W" + std::to_string(5 - (l + 1)), begin), end) << "group " << l + 1 << " waited for early";
      } else
        EXPECT_GT(start_next, end) << "forward without prefetch: group " << l + 1 << " gathered early";
      ++checked;
    }
    const size_t bwd = find(t, "B4");  // the first backward of the last layer
    for (int l = 4; l >= 2; --l) {     // backward of layer group l: group l - 1 in flight
      const size_t begin = find(t, "B" + std::to_string(l), bwd), end = find(t, "b" + std::to_string(l), begin);
      ASSERT_LT(end, t.size());
      const size_t start_prev = find(t, bucket_of(l - 1), begin);
      if (prefetch)
        EXPECT_LT(start_prev, end) << "backward: group " << l - 1 << " not in flight during group " << l;
      else
        EXPECT_GT(start_prev, end) << "backward without prefetch: group " << l - 1 << " gathered early";
      ++checked;
    }
    EXPECT_EQ(checked, 6u);
    for (const auto& r : res) {
      EXPECT_FALSE(r.flat_values_at_rest) << "ZeRO-3 keeps the parameters in shards at rest";
      EXPECT_FALSE(r.flat_grads_at_rest);
      // At most three groups gathered at once (this one, the prefetched
      // one, the tied embedding around the head), never the whole model.
      EXPECT_LT(r.max_params, r.padded * 3 / 4) << "prefetch " << prefetch;
      EXPECT_LT(r.max_grads, r.padded * 3 / 4) << "prefetch " << prefetch;
      EXPECT_GT(r.max_params, 0);
    }
  }
}

// The CPU allocator's bytes in use, which count every buffer (activations
// and scratch too), sampled after each forward, backward and the step, both
// ranks together: each strategy holds less than the one before it. By hand,
// per rank, P = padded parameters: ZeRO-1 keeps values and grads (4P each)
// and staging copies; ZeRO-2 drops the full grads but the buckets in use
// (a few layers of the model's six groups) and the staging; ZeRO-3 drops
// the values but the layers in use. So each step saves well over 2P bytes
// per rank; asserted: over 4P for both ranks.
TEST(ShardedDataParallel, BytesInUseShrinkWithEachStage) {
  const auto z1 = run_dp2(ShardingStrategy::Optim, false), z2 = run_dp2(ShardingStrategy::OptimGrads, false),
             z3 = run_dp2(ShardingStrategy::OptimGradsParams, false);
  const double p4 = static_cast<double>(z1[0].padded) * 4.0;
  const double b1 = static_cast<double>(z1[0].peak_bytes), b2 = static_cast<double>(z2[0].peak_bytes),
               b3 = static_cast<double>(z3[0].peak_bytes);
  EXPECT_LT(b2, b1 - p4) << "ZeRO-1 " << b1 << " B, ZeRO-2 " << b2 << " B, 4P " << p4;
  EXPECT_LT(b3, b2 - p4) << "ZeRO-2 " << b2 << " B, ZeRO-3 " << b3 << " B, 4P " << p4;
}

TEST(ShardedDataParallel, OneStepMatchesTheDistributedOptimizer) {
  const auto ref = run_dp2(ShardingStrategy::Optim, false);
  for (auto s : {ShardingStrategy::OptimGrads, ShardingStrategy::OptimGradsParams}) {
    const auto res = run_dp2(s, true);
    for (int rank = 0; rank < 2; ++rank) {
      const auto& got = res[static_cast<size_t>(rank)].values;
      const auto& want = ref[0].values;
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-6f + 1e-5f * std::fabs(want[i]))
            << distributed::sharding_strategy_name(s) << " rank " << rank << " element " << i;
      if (s == ShardingStrategy::OptimGrads) {
        EXPECT_TRUE(res[static_cast<size_t>(rank)].flat_values_at_rest);
        EXPECT_FALSE(res[static_cast<size_t>(rank)].flat_grads_at_rest) << "ZeRO-2 keeps no full gradient buffer";
        EXPECT_LT(res[static_cast<size_t>(rank)].max_grads, res[static_cast<size_t>(rank)].padded * 3 / 4);
      }
    }
  }
}

// NOTE [Compute-dtype all-gather]: under bf16 ZeRO-3 gathers each rank's
// piece cast to bf16, so the bound compute copy must hold exactly the bits
// of casting the whole fp32 parameters (a model built with the same seed
// and no sharding: ParamStore::sync_compute), the fp32-reading parameters
// (LayerNorms) their exact fp32 values, and every other parameter no fp32
// value at all (it was never gathered). Pieces of the final norm's group
// (64 elements at dp 2) cut it between its weight and bias, so the fp32
// gather's parts come from both ranks.
TEST(ShardedDataParallel, Zero3Bf16GathersTheCastPiecesBitForBit) {
  testing::run_ranks(2, std::chrono::seconds(60), [&](int /*rank*/, comm::DistContext& ctx) {
    auto be = backend::make_cpu_backend();
    const auto groups = parallel::make_process_groups(ctx, parallel::Layout::make(2, 1, 1, 1));
    model::StageConfig st;
    st.param_buffer_pad = 2;
    st.compute_dtype = DType::BF16;
    model::GptModel ref(cfg(), st, *be), m(cfg(), st, *be);
    ref.params().init(5, 0.02f, cfg().num_layers);
    ref.params().sync_compute();
    m.params().init(5, 0.02f, cfg().num_layers);
    DistributedDataParallelConfig dc;
    dc.sharding = ShardingStrategy::OptimGradsParams;
    dc.use_distributed_optimizer = true;
    DistributedDataParallel ddp({&m}, groups, *be, dc);
    ASSERT_TRUE(ddp.buffer(0).gathers_compute_dtype());
    model::ParamGatherer* g = ddp.param_gatherer(0);
    const auto& pg = m.param_groups();
    int fp32_checked = 0, compute_checked = 0;
    for (size_t grp = 0; grp < pg.size(); ++grp) {
      g->before(static_cast<int>(grp), Pass::Forward);
      for (size_t i : pg[grp]) {
        const model::Param& got = m.params().params()[i];
        const model::Param& want = ref.params().params()[i];
        const std::string& name = want.spec.name;
        ASSERT_TRUE(got.compute.defined()) << name;
        ASSERT_EQ(got.compute.nbytes(), want.compute.nbytes()) << name;
        EXPECT_EQ(std::memcmp(got.compute.raw(), want.compute.raw(), want.compute.nbytes()), 0) << name;
        if (model::is_layernorm(want.spec)) {
          ASSERT_TRUE(got.value.defined()) << name;
          EXPECT_EQ(std::memcmp(got.value.raw(), want.value.raw(), want.value.nbytes()), 0) << name;
          ++fp32_checked;
        } else {
          EXPECT_FALSE(got.value.defined()) << name << ": its fp32 value was gathered too";
          ++compute_checked;
        }
      }
      g->after(static_cast<int>(grp), Pass::Forward);
    }
    EXPECT_EQ(fp32_checked, 4 * cfg().num_layers + 2);  // two LayerNorms a layer, the final one
    EXPECT_GT(compute_checked, 0);
  });
}

// Hybrid sharding (NOTE [Distributed-optimizer instances]): dp4 as 2
// instances of 2 ranks, each strategy, one step of 3 micro-batches, against
// the distributed optimizer over all 4 ranks: the same grad norm and
// weights within rounding (the dp sum is cut in two: within the instance,
// then across), on every rank.
TEST(ShardedDataParallel, TwoInstancesMatchOneOverDp4) {
  const auto ref = run_dp4(ShardingStrategy::Optim, 1);
  for (auto s : {ShardingStrategy::Optim, ShardingStrategy::OptimGrads, ShardingStrategy::OptimGradsParams}) {
    const auto res = run_dp4(s, 2);
    for (int rank = 0; rank < 4; ++rank) {
      const RankResult& got = res[static_cast<size_t>(rank)];
      EXPECT_NEAR(got.grad_norm, ref[0].grad_norm, 1e-6 * ref[0].grad_norm) << distributed::sharding_strategy_name(s);
      ASSERT_EQ(got.values.size(), ref[0].values.size());
      for (size_t i = 0; i < got.values.size(); ++i)
        ASSERT_NEAR(got.values[i], ref[0].values[i], 1e-6f + 1e-5f * std::fabs(ref[0].values[i]))
            << distributed::sharding_strategy_name(s) << " rank " << rank << " element " << i;
    }
  }
}

}  // namespace
}  // namespace tripod
