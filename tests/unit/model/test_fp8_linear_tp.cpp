// The FP8 path of the tensor-parallel linears (model/tensor_parallel.h with
// an Fp8Linear, model/fp8_meta.h) at tp 2, with and without sequence
// parallelism, against one process (threads as ranks over the Gloo
// communicator): with the amaxes reduced over tp, every scale, inverse
// scale and amax history is bit for bit the single process's, for both
// recipes (delayed: after an iteration's update), so every rank casts the
// same FP8 codes. Where the layout does not change a sum's order the
// results are then bitwise equal too (the column-parallel output shard and
// weight gradient, the row-parallel weight gradient); the rest within 1e-5.
// Without the tp reduction the scales of the split tensors differ and this
// test fails (checked by removing it); the same for the dp reduction of
// delayed scaling (Fp8LinearDp).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "model/tensor_parallel.h"
#include "parallel/groups.h"
#include "testing/tensor_close.h"
#include "testing/threads_as_ranks.h"

namespace tripod {
namespace {

using namespace std::chrono_literals;
using model::ShardDim;

Tensor randn(const Shape& s, uint64_t seed, float scale = 1.f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n;
  Tensor t = Tensor::empty(s, DType::F32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = scale * n(g);
  return t;
}
Tensor zeros(const Shape& s) { return Tensor::zeros(s, DType::F32); }

model::Param shard_param(const char* name, const Tensor& full, ShardDim shard, int tp, int r) {
  model::Param p;
  p.spec.name = name;
  p.value = model::take_shard(full, shard, tp, r);
  p.compute = p.value;
  p.shape = p.value.shape();
  p.grad = zeros(p.shape);
  return p;
}
Tensor rows_of(const Tensor& t, bool sp, int tp, int r) { return sp ? t.narrow(r * (t.size(0) / tp), t.size(0) / tp) : t; }

constexpr int64_t kB = 2, kT = 8, N = kB * kT, C = 32, OC = 16;

struct Outputs {
  Tensor y_col, dx_col, dA, y_row, dh, dB;
  std::map<std::string, std::vector<float>> state;
};

// One iteration (two for delayed: the second with the updated scales) of
// a column- then a row-parallel FP8 linear on rank r of tp.
Outputs run_linears(const config::Fp8Config& cfg, int tp, int r, bool sp, comm::Communicator* group) {
  auto be = backend::make_cpu_backend();
  const Tensor X = randn({N, C}, 1), A = randn({OC, C}, 2, 0.05f), a = randn({OC}, 3), dYc = randn({N, OC}, 4, 1e-3f);
  const Tensor H = randn({N, OC}, 5, 3.f), Bw = randn({C, OC}, 6, 0.02f), b = randn({C}, 7), dYr = randn({N, C}, 8, 1e-4f);
  const model::TpContext tpc{group, sp && tp > 1};
  using Col = model::ColumnParallelLinear;
  using Row = model::RowParallelLinear;
  model::Param pA = shard_param("col.weight", A, Col::kWeightShard, tp, r), pa = shard_param("col.bias", a, Col::kBiasShard, tp, r);
  model::Param pB = shard_param("row.weight", Bw, Row::kWeightShard, tp, r), pb = shard_param("row.bias", b, Row::kBiasShard, tp, r);
  model::Fp8State st(cfg, 2, *be, group);
  Col col(&pA, &pa, tpc);
  Row row(&pB, &pb, tpc);
  col.use_fp8(st.add_linear(pA));
  row.use_fp8(st.add_linear(pB));
  const int64_t rows = tpc.sequence_parallel ? N / tp : N;
  Tensor full_a = zeros({N, C}), full_b = zeros({N, C}), shard = zeros({rows, C});
  Outputs o;
  const int iterations = cfg.delayed() ? 2 : 1;
  for (int it = 0; it < iterations; ++it) {
    st.begin_iteration();
    pA.grad = zeros(pA.shape), pB.grad = zeros(pB.shape);
    o.y_col = zeros({N, OC / tp});
    const Tensor x_local = rows_of(X, tpc.sequence_parallel, tp, r);
    const Tensor& x_full = col.forward(*be, o.y_col, x_local, full_a);
    const Tensor dy_c = model::take_shard(dYc, ShardDim::Cols, tp, r);
    const Tensor& dx = col.backward_input(*be, dy_c, full_b, shard);
    o.dx_col = zeros(dx.shape());
    be->copy(o.dx_col, dx);
    col.backward_weight(*be, dy_c, col.input(x_local, full_a));
    (void)x_full;
    Tensor h_r = model::take_shard(H, ShardDim::Cols, tp, r);
    Tensor& out = row.forward(*be, h_r, full_b, shard);
    o.y_row = zeros(out.shape());
    be->copy(o.y_row, out);
    o.dh = zeros({N, OC / tp});
    row.backward(*be, o.dh, rows_of(dYr, tpc.sequence_parallel, tp, r), h_r, full_a);
    st.end_iteration(nullptr);
  }
  o.dA = pA.grad;
  o.dB = pB.grad;
  for (auto& [name, t] : st.state_tensors()) o.state[name] = {t.data<float>(), t.data<float>() + t.numel()};
  return o;
}

void check(config::Fp8Recipe recipe, bool sp) {
  config::Fp8Config cfg;
  cfg.format = config::Fp8Format::Hybrid;
  cfg.recipe = recipe;
  cfg.amax_history_len = 2;
  cfg.amax_compute_algo = config::AmaxComputeAlgo::Max;
  const int tp = 2;
  const Outputs ref = run_linears(cfg, 1, 0, false, nullptr);
  testing::run_ranks(tp, 30s, [&](int r, comm::DistContext& ctx) {
    auto pg = parallel::make_process_groups(ctx, parallel::Layout::make(tp, tp, 1));
    const Outputs o = run_linears(cfg, tp, r, sp, pg.tp.get());
    ASSERT_EQ(o.state.size(), ref.state.size());
    for (const auto& [name, v] : ref.state) EXPECT_EQ(o.state.at(name), v) << name << " on tp rank " << r;
    auto exact = [&](const char* what, const Tensor& got, const Tensor& want) {
      ASSERT_EQ(got.numel(), want.numel()) << what;
      EXPECT_EQ(0, std::memcmp(got.raw(), want.raw(), static_cast<size_t>(got.numel()) * 4)) << what;
    };
    auto close = [&](const char* what, const Tensor& got, const Tensor& want) {
      ASSERT_EQ(got.numel(), want.numel()) << what;
      testing::expect_close(what, got.data<float>(), want.data<float>(), static_cast<size_t>(got.numel()), 1e-5);
    };
    using Col = model::ColumnParallelLinear;
    using Row = model::RowParallelLinear;
    exact("column output shard", o.y_col, model::take_shard(ref.y_col, ShardDim::Cols, tp, r));
    exact("column weight gradient shard", o.dA, model::take_shard(ref.dA, Col::kWeightShard, tp, r));
    exact("row weight gradient shard", o.dB, model::take_shard(ref.dB, Row::kWeightShard, tp, r));
    close("column dX", o.dx_col, rows_of(ref.dx_col.view({N, C}), sp, tp, r));
    close("row output", o.y_row, rows_of(ref.y_row, sp, tp, r));
    close("row dX shard", o.dh, model::take_shard(ref.dh, ShardDim::Cols, tp, r));
  });
}

// Delayed scaling over dp: two replicas each run one micro-batch, one
// process runs both in the iteration; after end_iteration (the amax max
// over dp) every scale and history is the single process's, bit for bit.
std::map<std::string, std::vector<float>> dp_state(int dp, int r, comm::Communicator* dp_group) {
  auto be = backend::make_cpu_backend();
  config::Fp8Config cfg;
  cfg.format = config::Fp8Format::Hybrid;
  cfg.amax_history_len = 2;
  const Tensor A = randn({OC, C}, 2, 0.05f);
  model::Param pA = shard_param("col.weight", A, ShardDim::None, 1, 0);
  model::Fp8State st(cfg, 1, *be, nullptr);
  model::ColumnParallelLinear col(&pA, nullptr, model::TpContext{});
  col.use_fp8(st.add_linear(pA));
  Tensor full = zeros({N, C}), dfull = zeros({N, C}), dshard = zeros({N, C}), y = zeros({N, OC});
  for (int it = 0; it < 2; ++it) {
    st.begin_iteration();
    for (int mb = 0; mb < 2; ++mb) {
      if (mb % dp != r) continue;  // the other replica's micro-batch
      // Micro-batch 1 is 10x larger: the max over dp is the other replica's amax.
      const Tensor x = randn({N, C}, 100 + 10 * it + mb, mb ? 10.f : 1.f);
      const Tensor dy = randn({N, OC}, 200 + 10 * it + mb, mb ? 1e-2f : 1e-3f);
      col.forward(*be, y, x, full);
      col.backward_input(*be, dy, dfull, dshard);
      col.backward_weight(*be, dy, x);
    }
    st.end_iteration(dp_group);
  }
  std::map<std::string, std::vector<float>> out;
  for (auto& [name, t] : st.state_tensors()) out[name] = {t.data<float>(), t.data<float>() + t.numel()};
  return out;
}

TEST(Fp8LinearDp, DelayedScalesMatchOneProcess) {
  const auto ref = dp_state(1, 0, nullptr);
  testing::run_ranks(2, 30s, [&](int r, comm::DistContext& ctx) {
    auto pg = parallel::make_process_groups(ctx, parallel::Layout::make(2, 1, 1));
    const auto got = dp_state(2, r, pg.dp.get());
    for (const auto& [name, v] : ref) EXPECT_EQ(got.at(name), v) << name << " on dp rank " << r;
  });
}

// Context parallelism: two cp ranks each hold half of every sequence (rows
// here), the weights whole; with current scaling the amaxes of x and dy are
// reduced over cp, so every scale is the single process's, bit for bit
// (delayed scaling reduces over dp x cp at the end of the iteration, as
// Fp8LinearDp checks for dp).
std::map<std::string, std::vector<float>> cp_state(int cp, int r, comm::Communicator* cp_group) {
  auto be = backend::make_cpu_backend();
  config::Fp8Config cfg;
  cfg.format = config::Fp8Format::Hybrid;
  cfg.recipe = config::Fp8Recipe::Tensorwise;
  const Tensor A = randn({OC, C}, 2, 0.05f);
  model::Param pA = shard_param("col.weight", A, ShardDim::None, 1, 0);
  model::Fp8State st(cfg, 1, *be, nullptr, cp_group);
  model::ColumnParallelLinear col(&pA, nullptr, model::TpContext{});
  col.use_fp8(st.add_linear(pA));
  // The second half of the rows is 10x larger: the max is the other rank's.
  Tensor X = randn({N, C}, 11), dY = randn({N, OC}, 12, 1e-3f);
  for (int64_t i = N / 2 * C; i < N * C; ++i) X.data<float>()[i] *= 10.f;
  for (int64_t i = N / 2 * OC; i < N * OC; ++i) dY.data<float>()[i] *= 10.f;
  const Tensor x = rows_of(X, cp > 1, cp, r), dy = rows_of(dY, cp > 1, cp, r);
  const int64_t rows = x.size(0);
  Tensor full = zeros({rows, C}), dfull = zeros({rows, C}), dshard = zeros({rows, C}), y = zeros({rows, OC});
  st.begin_iteration();
  col.forward(*be, y, x, full);
  col.backward_input(*be, dy, dfull, dshard);
  col.backward_weight(*be, dy, x);
  std::map<std::string, std::vector<float>> out;
  for (auto& [name, t] : st.state_tensors()) out[name] = {t.data<float>(), t.data<float>() + t.numel()};
  return out;
}

TEST(Fp8LinearCp, TensorwiseScalesMatchOneProcess) {
  const auto ref = cp_state(1, 0, nullptr);
  testing::run_ranks(2, 30s, [&](int r, comm::DistContext& ctx) {
    auto pg = parallel::make_process_groups(ctx, parallel::Layout::make(2, 1, 1, 1, 2));
    const auto got = cp_state(2, r, pg.cp.get());
    for (const auto& [name, v] : ref) EXPECT_EQ(got.at(name), v) << name << " on cp rank " << r;
  });
}

TEST(Fp8LinearTp, DelayedScalesMatchOneProcess) { check(config::Fp8Recipe::Delayed, false); }
TEST(Fp8LinearTp, DelayedScalesMatchOneProcessUnderSequenceParallel) { check(config::Fp8Recipe::Delayed, true); }
TEST(Fp8LinearTp, TensorwiseScalesMatchOneProcess) { check(config::Fp8Recipe::Tensorwise, false); }
TEST(Fp8LinearTp, TensorwiseScalesMatchOneProcessUnderSequenceParallel) { check(config::Fp8Recipe::Tensorwise, true); }

}  // namespace
}  // namespace tripod
