// The optimizer over data-parallel model chunks
// (distributed/distributed_optimizer.h), through its public API only, on 2
// ranks (threads, Gloo, CPU backend), not sharded and sharded, with and
// without the overlap paths of the DDP: each rank puts its own gradients in
// the buffer; reduce_grads, get_grad_norm and two steps must give the numbers
// of an independent computation in the test (the dp sum, the L2 norm, and
// AdamW with bias correction and per-parameter weight decay, written out in
// double), on both ranks; state() must hold the same moments in
// full-parameter order whatever the sharding, and set_state() must restore
// them. With a bf16/fp16 compute dtype, the compute copy must be the cast of
// the master weights after every step, whether the update writes it
// (not sharded) or the all-gather is followed by a cast (sharded).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "base/debug_config.h"
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

struct Case {
  const char* name;
  bool sharded, overlap_grads, overlap_params;
  DType compute = DType::F32;  // the model's compute dtype (the copy the optimizer refreshes)
};

// Every element of the compute copy (padding included) is the cast of its
// master weight, bit for bit.
void expect_compute_copy_is_cast(model::ParamStore& store, const char* where) {
  if (store.compute_dtype() == DType::F32) return;
  const float* val = store.values().data<float>();
  const uint16_t* c = store.compute_values().data_u16();
  const bool bf16 = store.compute_dtype() == DType::BF16;
  for (int64_t i = 0; i < store.padded_numel(); ++i)
    ASSERT_EQ(c[i], bf16 ? f32_to_bf16(val[i]) : f32_to_f16(val[i])) << where << ", element " << i;
}

config::GptConfig tiny_config() { return testing::tiny_gpt(); }

// Rank r's gradient of element i (distinct per rank, both signs, not all
// representable sums: the reference sums them in float as the reduction does).
float grad_of(int rank, int64_t i) {
  return static_cast<float>(static_cast<int>((i * 37 + rank * 11) % 23) - 11) * 1.7e-3f + 1e-4f * rank;
}

void run_case(const Case& cs) {
  using namespace std::chrono_literals;
  constexpr int kDp = 2;
  const double lr = 3e-3, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
  const float grad_scale[2] = {1.0f, 0.5f};  // step 2 as if clipped / loss-scaled
  testing::run_ranks(kDp, 30s, [&](int rank, comm::DistContext& ctx) {
    auto be = backend::make_cpu_backend();
    const parallel::ProcessGroups groups = parallel::make_process_groups(ctx, parallel::Layout::make(kDp, 1, 1, 1));
    model::StageConfig st;
    st.param_buffer_pad = cs.sharded ? kDp : 1;
    st.compute_dtype = cs.compute;
    model::GptModel m(tiny_config(), st, *be);
    auto& store = m.params();
    store.init(7, 0.02f, tiny_config().num_layers);

    DistributedDataParallelConfig dc;
    dc.use_distributed_optimizer = cs.sharded;
    dc.overlap_grad_reduce = cs.overlap_grads;
    dc.overlap_param_gather = cs.overlap_params;
    dc.bucket_size = 3000;  // several buckets when overlapping (else one)
    DistributedDataParallel ddp({&m}, groups, *be, dc);
    DistributedOptimizer opt(ddp, groups, *be, optim::AdamWConfig{b1, b2, eps, wd});
    ASSERT_EQ(opt.sharded(), cs.sharded);
    if (cs.overlap_grads) ASSERT_GT(ddp.buffer(0).buckets().size(), 1u);
    const int64_t padded = store.padded_numel();
    EXPECT_EQ(opt.shard_numel(), cs.sharded ? ddp.buffer(0).shard_numel() : padded);
    if (cs.sharded && !cs.overlap_grads) EXPECT_EQ(opt.shard_numel(), padded / kDp);

    // The reference, in double from the same float inputs.
    const auto& params = store.params();
    const size_t np = static_cast<size_t>(padded);
    std::vector<double> p_ref(np), m_ref(np), v_ref(np);  // zeros
    for (int64_t i = 0; i < padded; ++i) p_ref[static_cast<size_t>(i)] = store.values().data<float>()[i];

    for (int it = 0; it < 2; ++it) {
      ddp.zero_grad_buffer();
      float* g = store.grads().data<float>();
      for (const auto& p : params)
        for (int64_t i = p.offset; i < p.offset + shape_numel(p.shape); ++i) g[i] = grad_of(rank, i) * (it + 1);
      if (cs.overlap_grads) {  // as the backward hooks would: every group final, last layers first
        const auto& pg = m.param_groups();
        for (size_t k = pg.size(); k-- > 0;) ddp.register_grad_ready(0, pg[k]);
      }
      opt.reduce_grads();

      double sq = 0;
      std::vector<float> gsum(p_ref.size(), 0.f);
      for (const auto& p : params)
        for (int64_t i = p.offset; i < p.offset + shape_numel(p.shape); ++i) {
          const float s = grad_of(0, i) * (it + 1) + grad_of(1, i) * (it + 1);  // the dp sum, in float
          gsum[static_cast<size_t>(i)] = s;
          sq += static_cast<double>(s) * s;
        }
      const double norm = opt.get_grad_norm();
      EXPECT_NEAR(norm, std::sqrt(sq), 1e-5 * std::sqrt(sq)) << "iteration " << it;

      opt.step(lr, grad_scale[it]);
      EXPECT_EQ(opt.steps(), it + 1);
      const double bc1 = 1 - std::pow(b1, it + 1), bc2 = 1 - std::pow(b2, it + 1);
      for (const auto& p : params) {
        const double decay = p.spec.weight_decay ? wd : 0.0;
        for (int64_t i = p.offset; i < p.offset + shape_numel(p.shape); ++i) {
          const size_t k = static_cast<size_t>(i);
          const double gi = static_cast<double>(gsum[k]) * grad_scale[it];
          m_ref[k] = b1 * m_ref[k] + (1 - b1) * gi;
          v_ref[k] = b2 * v_ref[k] + (1 - b2) * gi * gi;
          p_ref[k] -= lr * ((m_ref[k] / bc1) / (std::sqrt(v_ref[k] / bc2) + eps) + decay * p_ref[k]);
        }
      }
      ddp.finish_param_sync();  // with --overlap-param-gather the values arrive here
      expect_compute_copy_is_cast(store, cs.name);
      const float* val = store.values().data<float>();
      for (const auto& p : params)
        for (int64_t i = p.offset; i < p.offset + shape_numel(p.shape); ++i)
          ASSERT_NEAR(val[i], p_ref[static_cast<size_t>(i)], 1e-6 + 1e-5 * std::fabs(p_ref[static_cast<size_t>(i)]))
              << p.spec.name << " element " << i - p.offset << ", iteration " << it << ", rank " << rank;
    }

    // The moments in full-parameter order (gathered over dp when sharded).
    auto [m0, v0] = opt.state(0);
    ASSERT_EQ(m0.numel(), padded);
    for (const auto& p : params)
      for (int64_t i = p.offset; i < p.offset + shape_numel(p.shape); ++i) {
        const size_t k = static_cast<size_t>(i);
        ASSERT_NEAR(m0.data<float>()[i], m_ref[k], 1e-9 + 1e-5 * std::fabs(m_ref[k])) << p.spec.name;
        ASSERT_NEAR(v0.data<float>()[i], v_ref[k], 1e-12 + 1e-5 * std::fabs(v_ref[k])) << p.spec.name;
      }
    // set_state takes full-order tensors: a modified copy comes back as given.
    Tensor m1 = Tensor::empty({padded}, DType::F32), v1 = Tensor::empty({padded}, DType::F32);
    for (int64_t i = 0; i < padded; ++i) {
      m1.data<float>()[i] = m0.data<float>()[i] * 2.f + 1.f;
      v1.data<float>()[i] = v0.data<float>()[i] + 0.25f;
    }
    opt.set_state(0, m1, v1, 9);
    EXPECT_EQ(opt.steps(), 9);
    auto [m2, v2] = opt.state(0);
    for (const auto& p : params)
      for (int64_t i = p.offset; i < p.offset + shape_numel(p.shape); ++i) {
        ASSERT_EQ(m2.data<float>()[i], m1.data<float>()[i]);
        ASSERT_EQ(v2.data<float>()[i], v1.data<float>()[i]);
      }
  });
}

TEST(DistributedOptimizer, NotShardedMatchesAdamWOnTheDpSum) { run_case({"plain", false, false, false}); }
TEST(DistributedOptimizer, NotShardedWithOverlappedGradReduce) { run_case({"overlap", false, true, false}); }
TEST(DistributedOptimizer, ShardedMatchesAdamWOnTheDpSum) { run_case({"sharded", true, false, false}); }
TEST(DistributedOptimizer, ShardedWithBothOverlaps) { run_case({"sharded+overlap", true, true, true}); }
// Mixed precision: not sharded, the update writes the compute copy itself
// (adamw_update's compute_out); TRIPOD_UNFUSED_ADAMW_CAST=1 casts after it.
TEST(DistributedOptimizer, NotShardedBf16UpdateWritesTheComputeCopy) {
  run_case({"plain bf16", false, false, false, DType::BF16});
  run_case({"overlap fp16", false, true, false, DType::F16});
}
TEST(DistributedOptimizer, NotShardedBf16UnfusedCast) {
  ::setenv("TRIPOD_UNFUSED_ADAMW_CAST", "1", 1);
  reload_debug_config();
  run_case({"plain bf16 unfused", false, false, false, DType::BF16});
  ::unsetenv("TRIPOD_UNFUSED_ADAMW_CAST");
  reload_debug_config();
}
TEST(DistributedOptimizer, ShardedBf16CastsAfterTheGather) {
  run_case({"sharded bf16", true, false, false, DType::BF16});
  run_case({"sharded+overlap fp16", true, true, true, DType::F16});
}

}  // namespace
}  // namespace tripod
