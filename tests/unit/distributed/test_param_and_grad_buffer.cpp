// The data-parallel param/grad buffer and its buckets
// (distributed/param_and_grad_buffer.h):
//  - the split, against a hand count and as properties over many random
//    parameter lists (parameter boundaries, reverse order, Megatron's size
//    rule, every parameter in exactly one bucket, lone parameters);
//  - overlap really happens: driving a 4-layer GptModel through the pipeline
//    schedule (3 micro-batches) with a recording dp communicator, buckets
//    are launched during the last micro-batch's backward, last layers first,
//    each at a moment when its own gradients are already final while the
//    embedding's are not;
//  - the tied embedding's deferred bucket is launched by start_grad_sync()
//    only, in every iteration;
//  - the distributed-optimizer layout on 2 ranks (threads, Gloo) with bucket
//    sizes that are not multiples of dp: per-bucket reduce-scatter, shard
//    segments, gather/take of full-order tensors and the async param
//    all-gather, against sums computed by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "comm/local_communicator.h"
#include "distributed/param_and_grad_buffer.h"
#include "model/gpt_model.h"
#include "parallel/pp_schedule.h"
#include "testing/threads_as_ranks.h"
#include "testing/tiny_model.h"
#include "train/pipeline_stage.h"

namespace tripod {
namespace {

using distributed::BucketRange;
using distributed::ParamAndGradBuffer;
using distributed::split_buckets;

struct Params {
  std::vector<int64_t> offsets, numels;
  int64_t padded = 0;
};

Params layout(const std::vector<int64_t>& sizes, int64_t pad) {
  Params p;
  int64_t off = 0;
  for (int64_t n : sizes) {
    p.offsets.push_back(off);
    p.numels.push_back(n);
    off += n;
  }
  p.padded = (off + pad - 1) / pad * pad;
  return p;
}

TEST(SplitBuckets, HandCount) {
  // Sizes 10 3 7 5 20 2 at offsets 0 10 13 20 25 45, 47 elements padded to 48.
  const Params p = layout({10, 3, 7, 5, 20, 2}, 4);
  const std::vector<bool> none(6, false);
  // Limit 12, walking back from 48: {2 (+1 pad)} 3 < 12, +20 -> 23 closes
  // [25,48); 5 < 12, +7 -> 12 closes [13,25); 3, +10 -> 13 closes [0,13).
  auto b = split_buckets(p.offsets, p.numels, p.padded, 12, none);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].begin, 25); EXPECT_EQ(b[0].end, 48); EXPECT_EQ(b[0].first_param, 4); EXPECT_EQ(b[0].end_param, 6);
  EXPECT_EQ(b[1].begin, 13); EXPECT_EQ(b[1].end, 25); EXPECT_EQ(b[1].first_param, 2); EXPECT_EQ(b[1].end_param, 4);
  EXPECT_EQ(b[2].begin, 0); EXPECT_EQ(b[2].end, 13); EXPECT_EQ(b[2].first_param, 0); EXPECT_EQ(b[2].end_param, 2);
  // Parameter 0 alone (the tied embedding): the open bucket {3} closes before it.
  std::vector<bool> alone(6, false);
  alone[0] = true;
  b = split_buckets(p.offsets, p.numels, p.padded, 12, alone);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[2].begin, 10); EXPECT_EQ(b[2].end, 13); EXPECT_EQ(b[2].first_param, 1);
  EXPECT_EQ(b[3].begin, 0); EXPECT_EQ(b[3].end, 10); EXPECT_EQ(b[3].end_param, 1);
  // No limit: one bucket, the whole padded buffer.
  b = split_buckets(p.offsets, p.numels, p.padded, 0, none);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].begin, 0); EXPECT_EQ(b[0].end, 48); EXPECT_EQ(b[0].end_param, 6);
  // Limit 4: {2, pad 1} = 3 < 4 so it shares with the 20 -> [25,48); then
  // 5, 7 alone; 3 < 4 shares with the 10 -> [0,13).
  b = split_buckets(p.offsets, p.numels, p.padded, 4, none);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0].numel(), 23);
  EXPECT_EQ(b[1].begin, 20); EXPECT_EQ(b[1].end, 25);
  EXPECT_EQ(b[2].begin, 13); EXPECT_EQ(b[2].end, 20);
  EXPECT_EQ(b[3].begin, 0); EXPECT_EQ(b[3].end, 13); EXPECT_EQ(b[3].end_param, 2);
}

TEST(SplitBuckets, PropertiesOverRandomLayouts) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 40);
    std::vector<int64_t> sizes;
    std::vector<bool> alone;
    for (int i = 0; i < n; ++i) {
      sizes.push_back(1 + static_cast<int64_t>(rng() % 500));
      alone.push_back(rng() % 13 == 0);
    }
    const Params p = layout(sizes, 1 + static_cast<int64_t>(rng() % 8));
    const int64_t limit = static_cast<int64_t>(rng() % 2000);  // 0: one bucket
    const auto b = split_buckets(p.offsets, p.numels, p.padded, limit, alone);
    ASSERT_FALSE(b.empty());
    EXPECT_EQ(b.front().end, p.padded);
    EXPECT_EQ(b.back().begin, 0);
    std::vector<int> seen(static_cast<size_t>(n), 0);
    for (size_t k = 0; k < b.size(); ++k) {
      const BucketRange& r = b[k];
      ASSERT_LT(r.first_param, r.end_param);
      EXPECT_EQ(r.begin, p.offsets[static_cast<size_t>(r.first_param)]) << "bucket starts at a parameter";
      if (k > 0) {
        EXPECT_EQ(r.end, b[k - 1].begin) << "buckets tile the buffer in reverse order";
        EXPECT_EQ(r.end_param, b[k - 1].first_param);
      }
      for (int i = r.first_param; i < r.end_param; ++i) ++seen[static_cast<size_t>(i)];
      bool has_alone = false;
      for (int i = r.first_param; i < r.end_param; ++i) has_alone = has_alone || alone[static_cast<size_t>(i)];
      if (has_alone) {
        EXPECT_EQ(r.end_param - r.first_param, 1) << "a lone parameter shares no bucket";
        continue;
      }
      // Megatron's rule: the bucket closed once it reached the limit, so
      // without its last-added (lowest) parameter it was below it (bucket 0
      // also holds the tail padding, which only closes it together with a parameter)...
      const int64_t tail = k == 0 ? p.padded - (p.offsets.back() + p.numels.back()) : 0;
      if (limit > 0) EXPECT_LT(r.numel() - tail - p.numels[static_cast<size_t>(r.first_param)], limit);
      // ...and it reached the limit unless the walk ended or a lone one came next.
      const bool next_alone = r.first_param > 0 && alone[static_cast<size_t>(r.first_param - 1)];
      if (r.first_param > 0 && !next_alone) {
        if (limit > 0) EXPECT_GE(r.numel(), limit);
        else ADD_FAILURE() << "no limit must give one bucket (or lone splits)";
      }
    }
    for (int i = 0; i < n; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)], 1) << "parameter " << i;
  }
}

// A dp group of 2 whose collectives record the gradient buffer at launch
// and leave the data alone (the sum over identical ranks is not the point).
class RecordingComm final : public comm::Communicator {
 public:
  explicit RecordingComm(const Tensor& grads) : grads_(grads) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  const std::string& name() const override { return name_; }
  std::shared_ptr<comm::Work> all_reduce(Tensor& t, const comm::AllReduceOptions&) override {
    const float* g = grads_.data<float>();
    snapshots.emplace_back(g, g + grads_.numel());
    offsets.push_back(static_cast<int64_t>(t.data<float>() - g));
    return local_.all_reduce(t);
  }
  std::shared_ptr<comm::Work> all_gather(Tensor&, const Tensor&, const comm::AllGatherOptions&) override { fail(); }
  std::shared_ptr<comm::Work> reduce_scatter(Tensor&, const Tensor&, const comm::ReduceScatterOptions&) override {
    fail();
  }
  std::shared_ptr<comm::Work> broadcast(Tensor&, const comm::BroadcastOptions&) override { fail(); }
  std::shared_ptr<comm::Work> send(const Tensor&, int, const comm::SendOptions&) override { fail(); }
  std::shared_ptr<comm::Work> recv(Tensor&, int, const comm::RecvOptions&) override { fail(); }
  void barrier(const comm::BarrierOptions&) override {}
  void abort() noexcept override {}

  std::vector<std::vector<float>> snapshots;  // the whole grad buffer at each launch
  std::vector<int64_t> offsets;               // where each launched range starts

 private:
  [[noreturn]] static void fail() { throw std::logic_error("not used by this test"); }
  Tensor grads_;
  std::string name_ = "dp";
  comm::LocalCommunicator local_{"dp-local"};
};

// A fixed dataset of n samples of `length` ids: sample s, position j holds
// (s * 13 + j * 7) % vocab.
class Samples final : public data::TokenDataset {
 public:
  Samples(int64_t n, int64_t length, int64_t vocab) : n_(n), length_(length), vocab_(vocab) {}
  int64_t num_samples() const override { return n_; }
  int64_t sample_length() const override { return length_; }
  void get(int64_t s, int32_t* out) const override {
    for (int64_t j = 0; j < length_; ++j) out[j] = static_cast<int32_t>((s * 13 + j * 7) % vocab_);
  }
  std::string describe() const override { return "test samples"; }

 private:
  int64_t n_, length_, vocab_;
};

TEST(ParamAndGradBuffer, LaunchedDuringTheLastMicroBatchBackwardLastLayersFirst) {
  auto be = backend::make_cpu_backend();
  const config::GptConfig cfg = testing::tiny_gpt(
      {.num_layers = 4, .hidden_size = 32, .num_attention_heads = 4, .seq_length = 16, .vocab_size = 96});
  model::GptModel m(cfg, model::StageConfig{}, *be);
  m.params().init(3, 0.02f, cfg.num_layers);
  auto& store = m.params();
  RecordingComm dp(store.grads());
  // ~12.7k elements a layer: a 10000-element limit closes about one bucket a layer.
  ParamAndGradBuffer buckets(store, dp, *be, 10000, false, std::vector<bool>(store.params().size(), false));
  const auto& b = buckets.buckets();
  ASSERT_GE(b.size(), 4u);

  const int M = 3;
  std::vector<std::string> events;  // "R<group>" grads ready, "L<bucket>" launch
  buckets.on_launch = [&](int k) { events.push_back("L" + std::to_string(k)); };
  const auto& groups = m.param_groups();
  train::GptPipelineStage stage({&m}, 2, cfg.seq_length);
  stage.set_param_hooks(M - 1, [&](int, const std::vector<size_t>& p) {
    for (size_t g = 0; g < groups.size(); ++g)
      if (groups[g] == p) events.push_back("R" + std::to_string(g));
    buckets.register_grad_ready(p);
  }, {});
  store.zero_grad();
  buckets.reset();
  const Samples data(M * 2, cfg.seq_length + 1, cfg.vocab_size);
  stage.begin(true, 1.f / (M * 2 * cfg.seq_length), 9, train::BatchSource(data, 0, 0, 1, 2));
  comm::LocalCommunicator pp("pp");
  parallel::ScheduleConfig sc;
  sc.num_microbatches = M;
  parallel::run_pipeline_schedule(stage, pp, sc);
  ASSERT_TRUE(buckets.all_grads_ready());
  buckets.finish_grad_sync();

  // Hooks fired once per group (the last micro-batch only), head first,
  // embedding (group 0) last; every bucket launched inside them, in order.
  size_t ready = 0, launched = 0;
  for (const auto& e : events) (e[0] == 'R' ? ready : launched)++;
  EXPECT_EQ(ready, groups.size());
  ASSERT_EQ(launched, b.size());
  EXPECT_EQ(events.front(), "R" + std::to_string(groups.size() - 1));
  EXPECT_EQ(events[events.size() - 2], "R0");
  EXPECT_EQ(events.back(), "L" + std::to_string(b.size() - 1)) << "the embedding's bucket completes with it";
  int next = 0;
  for (const auto& e : events)
    if (e[0] == 'L') EXPECT_EQ(e, "L" + std::to_string(next++)) << "launch order";
  // The first launch comes right after the head and the last layer.
  EXPECT_EQ(events[0][0], 'R');
  EXPECT_EQ(events[1], "R" + std::to_string(groups.size() - 2));
  EXPECT_EQ(events[2], "L0") << "bucket 0 (final norm + part of the last layer) starts right away";

  // Numbers: at each launch its bucket already holds the final gradients
  // (nothing writes them later), while the embedding's (bucket n-1) are not
  // final before its own launch: the reduction overlapped the backward.
  const float* fin = store.grads().data<float>();
  const auto& wpe = store.get("embedding.position_embeddings.weight");
  const int64_t wpe_n = shape_numel(wpe.shape);
  for (size_t k = 0; k < b.size(); ++k) {
    ASSERT_EQ(dp.offsets[k], b[k].begin);
    const auto& snap = dp.snapshots[k];
    for (int64_t i = b[k].begin; i < b[k].end; ++i)
      ASSERT_EQ(snap[static_cast<size_t>(i)], fin[i]) << "bucket " << k << " element " << i;
    if (k + 1 < b.size()) {
      double diff = 0;
      for (int64_t i = wpe.offset; i < wpe.offset + wpe_n; ++i) diff += std::fabs(snap[static_cast<size_t>(i)] - fin[i]);
      EXPECT_GT(diff, 0.0) << "bucket " << k << " launched after the embedding's gradients were final";
    }
  }
}

// The tied embedding (deferred): its own bucket, never launched by the
// hooks, only by start_grad_sync() after the embedding-group all-reduce.
TEST(ParamAndGradBuffer, DeferredBucketWaitsForStartGradSync) {
  auto be = backend::make_cpu_backend();
  std::vector<model::ParamSpec> specs;
  for (int i = 0; i < 4; ++i)
    specs.push_back({"p" + std::to_string(i), {8}, model::ShardDim::None, model::InitKind::Zeros, true, -1});
  model::ParamStore store(std::move(specs), 1, 0, *be);
  RecordingComm dp(store.grads());
  ParamAndGradBuffer gb(store, dp, *be, 1000, false, {true, false, false, false});
  const auto& b = gb.buckets();
  ASSERT_EQ(b.size(), 2u);  // {p1..p3} then {p0} alone
  EXPECT_EQ(b[0].begin, 8);
  EXPECT_EQ(b[1].end, 8);
  std::vector<int> launches;
  gb.on_launch = [&](int k) { launches.push_back(k); };
  for (int it = 0; it < 2; ++it) {  // twice: the per-iteration state resets
    launches.clear();
    gb.reset();
    gb.register_grad_ready({3, 2});
    EXPECT_TRUE(launches.empty());
    gb.register_grad_ready({1, 0});
    EXPECT_EQ(launches, std::vector<int>{0}) << "the deferred bucket must not launch from the hook";
    EXPECT_TRUE(gb.all_grads_ready());
    gb.start_grad_sync();
    EXPECT_EQ(launches, (std::vector<int>{0, 1}));
    gb.finish_grad_sync();
  }
}

// Two ranks: params of odd sizes so buckets are not multiples of dp.
TEST(ParamAndGradBuffer, DistributedLayoutTwoRanks) {
  using namespace std::chrono_literals;
  const std::vector<int64_t> sizes = {5, 9, 7, 4, 11, 3};  // 39 elements, padded to 40
  testing::run_ranks(2, 20s, [&](int rank, comm::DistContext& ctx) {
    auto be = backend::make_cpu_backend();
    std::vector<model::ParamSpec> specs;
    for (size_t i = 0; i < sizes.size(); ++i)
      specs.push_back({"p" + std::to_string(i), {sizes[i]}, model::ShardDim::None, model::InitKind::Zeros,
                       i % 2 == 0, -1});
    model::ParamStore store(std::move(specs), 1, 0, *be, 2);
    ASSERT_EQ(store.padded_numel(), 40);
    auto dp = ctx.world();
    std::vector<bool> alone(sizes.size(), false);
    ParamAndGradBuffer gb(store, *dp, *be, 10, true, alone);
    // Offsets 0 5 14 21 25 36. Walk back from 40: {3 + pad 1} = 4, +11 = 15
    // closes [25,40); 4, +7 = 11 closes [14,25); 9, +5 = 14 closes [0,14).
    const auto& b = gb.buckets();
    ASSERT_EQ(b.size(), 3u);
    EXPECT_EQ(b[0].begin, 25); EXPECT_EQ(b[1].begin, 14); EXPECT_EQ(b[2].numel(), 14);
    // Pieces: 15 -> 16/2 = 8, 11 -> 12/2 = 6 (both through staging), 14/2 = 7.
    EXPECT_EQ(gb.shard_numel(), 8 + 6 + 7);

    float* g = store.grads().data<float>();
    for (int64_t i = 0; i < 40; ++i) g[i] = i < 39 ? static_cast<float>((rank + 1) * 1000 + i) : 0.f;
    gb.reset();
    gb.register_grad_ready({5, 4});  // completes bucket 0 only
    gb.register_grad_ready({3, 2, 1, 0});
    gb.finish_grad_sync();
    // Expected shard: per bucket, this rank's piece of the summed buffer
    // (sum over ranks of (r+1)*1000 + i = 3000 + 2i), zero in the padding.
    std::vector<float> want;
    const int64_t lens[3] = {8, 6, 7};
    for (size_t k = 0; k < 3; ++k)
      for (int64_t j = 0; j < lens[k]; ++j) {
        const int64_t i = b[k].begin + rank * lens[k] + j;
        want.push_back(i < b[k].end && i < 39 ? static_cast<float>(3000 + 2 * i) : 0.f);
      }
    const Tensor& shard = gb.reduced_grads();
    ASSERT_EQ(shard.numel(), 21);
    for (int64_t j = 0; j < 21; ++j) EXPECT_EQ(shard.data<float>()[j], want[static_cast<size_t>(j)]) << "shard " << j;

    // Segments: the real elements of this rank's pieces, decay flag by parameter.
    int64_t covered = 0;
    for (const auto& s : gb.shard_segments([](const model::Param&) { return true; })) covered += s.numel;
    int64_t real = 0;
    for (size_t k = 0; k < 3; ++k)
      real += std::clamp<int64_t>(std::min<int64_t>(b[k].end, 39) - (b[k].begin + rank * lens[k]), 0, lens[k]);
    EXPECT_EQ(covered, real);
    int64_t decayed = 0;
    for (const auto& s : gb.shard_segments([](const model::Param& p) { return p.spec.weight_decay; })) {
      EXPECT_TRUE(s.weight_decay);
      decayed += s.numel;
    }
    EXPECT_LT(decayed, covered);

    // gather_shards / take_shard: full-order round trip of a shard-shaped tensor.
    Tensor full = Tensor::empty({40}, DType::F32);
    gb.gather_shards(full, shard);
    for (int64_t i = 0; i < 40; ++i) EXPECT_EQ(full.data<float>()[i], i < 39 ? 3000.f + 2 * i : 0.f) << i;
    Tensor back = Tensor::zeros({21}, DType::F32);
    gb.take_shard(back, full);
    for (int64_t j = 0; j < 21; ++j) EXPECT_EQ(back.data<float>()[j], want[static_cast<size_t>(j)]);

    // Async param all-gather: values arrive per bucket as they are needed.
    Tensor vs = Tensor::empty({21}, DType::F32);
    for (int64_t j = 0; j < 21; ++j) vs.data<float>()[j] = want[static_cast<size_t>(j)] + 0.5f;
    gb.start_param_sync(vs);
    EXPECT_TRUE(gb.param_sync_pending());
    gb.finish_param_sync({0});  // bucket 2
    for (int64_t i = 0; i < 13; ++i) EXPECT_EQ(store.values().data<float>()[i], 3000.5f + 2 * i);
    gb.finish_param_sync();
    EXPECT_FALSE(gb.param_sync_pending());
    for (int64_t i = 0; i < 39; ++i) EXPECT_EQ(store.values().data<float>()[i], 3000.5f + 2 * i) << i;
  });
}

// NOTE [bf16 gradient communication]: with the reduction in bf16, each
// rank's f32 gradient is rounded to bf16 once, the two are summed (in f32,
// then rounded to bf16, as every communicator sums two bf16 values) and the
// result is widened back to f32: by hand, bf16(bf16(g0) + bf16(g1)). Both
// the all-reduce (no distributed optimizer) and the distributed optimizer's
// reduce-scatter into the shard, with buckets that need padding.
TEST(ParamAndGradBuffer, Bf16CommunicationRoundsEachRanksGradientOnce) {
  using namespace std::chrono_literals;
  const std::vector<int64_t> sizes = {5, 9, 7, 4, 11, 3};  // 39 elements, padded to 40
  auto grad = [](int rank, int64_t i) { return static_cast<float>((rank + 1) * 1000 + i) + 0.3f; };
  auto bf16 = [](float x) { return bf16_to_f32(f32_to_bf16(x)); };
  for (const bool distributed : {false, true}) {
    testing::run_ranks(2, 20s, [&](int rank, comm::DistContext& ctx) {
      auto be = backend::make_cpu_backend();
      std::vector<model::ParamSpec> specs;
      for (size_t i = 0; i < sizes.size(); ++i)
        specs.push_back({"p" + std::to_string(i), {sizes[i]}, model::ShardDim::None, model::InitKind::Zeros, true, -1});
      model::ParamStore store(std::move(specs), 1, 0, *be, 2);
      auto dp = ctx.world();
      ParamAndGradBuffer gb(store, *dp, *be, 10, distributed, std::vector<bool>(sizes.size(), false));
      gb.set_grad_comm_dtype(DType::BF16);
      float* g = store.grads().data<float>();
      for (int64_t i = 0; i < 40; ++i) g[i] = i < 39 ? grad(rank, i) : 0.f;
      gb.reset();
      gb.start_grad_sync();
      gb.finish_grad_sync();
      auto want = [&](int64_t i) { return i < 39 ? bf16(bf16(grad(0, i)) + bf16(grad(1, i))) : 0.f; };
      if (!distributed) {
        for (int64_t i = 0; i < 39; ++i) ASSERT_EQ(g[i], want(i)) << "element " << i;
        ASSERT_NE(g[7], grad(0, 7) + grad(1, 7));  // the f32 sum: bf16 did round
        return;
      }
      Tensor full = Tensor::empty({40}, DType::F32);
      gb.gather_shards(full, gb.reduced_grads());
      for (int64_t i = 0; i < 40; ++i) ASSERT_EQ(full.data<float>()[i], want(i)) << "element " << i;
    });
  }
}

}  // namespace
}  // namespace tripod
