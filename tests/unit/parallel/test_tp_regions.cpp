// The tensor-/sequence-parallel regions of parallel/tp_regions.h, forward
// and backward, at tp 1 (no group: the fast path), 2 and 4 (threads as
// ranks over Gloo). Every rank holds distinct integer-valued data, so the
// expected sums, gathers and row blocks are exact.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>

#include "parallel/groups.h"
#include "parallel/tp_regions.h"
#include "testing/threads_as_ranks.h"

namespace tripod {
namespace {

using namespace std::chrono_literals;
using namespace parallel;

constexpr int64_t N = 8, C = 3;

// Rank r's value at element i.
float value(int r, int64_t i) { return static_cast<float>(100 * r + i); }
Tensor rank_tensor(int r, int64_t rows, int64_t row0 = 0) {
  Tensor t = Tensor::empty({rows, C}, DType::F32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = value(r, row0 * C + i);
  return t;
}
// Sum over ranks of value(r, i).
float sum_over(int tp, int64_t i) {
  float s = 0;
  for (int r = 0; r < tp; ++r) s += value(r, i);
  return s;
}

void expect_elems(const char* what, const Tensor& t, const std::function<float(int64_t)>& want) {
  for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.data<float>()[i], want(i)) << what << " element " << i;
}

void check(int tp) {
  testing::run_ranks(tp, 20s, [&](int r, comm::DistContext& ctx) {
    auto pg = make_process_groups(ctx, Layout::make(tp, tp, 1));
    comm::Communicator* g = pg.tp.get();
    const int64_t rows = N / tp;

    // f: identity forward (the same tensor), all-reduce backward.
    Tensor x = rank_tensor(r, N);
    EXPECT_EQ(&copy_to_tensor_model_parallel_region(x), &x);
    copy_to_tensor_model_parallel_region_backward(g, x);
    expect_elems("copy_to backward", x, [&](int64_t i) { return sum_over(tp, i); });

    // g: all-reduce forward, identity backward.
    Tensor y = rank_tensor(r, N);
    reduce_from_tensor_model_parallel_region(g, y);
    expect_elems("reduce_from forward", y, [&](int64_t i) { return sum_over(tp, i); });
    EXPECT_EQ(&reduce_from_tensor_model_parallel_region_backward(y), &y);

    // scatter: this rank's rows (a view); backward all-gathers.
    Tensor full = rank_tensor(0, N);
    Tensor mine = scatter_to_sequence_parallel_region(g, full);
    ASSERT_EQ(mine.numel(), rows * C);
    EXPECT_EQ(mine.raw(), static_cast<void*>(full.data<float>() + r * rows * C)) << "a view, no copy";
    Tensor dfull = Tensor::empty({N, C}, DType::F32);
    scatter_to_sequence_parallel_region_backward(g, dfull, rank_tensor(r, rows, r * rows));
    expect_elems("scatter backward", dfull, [&](int64_t i) { return value(static_cast<int>(i / (rows * C)), i); });

    // gather: all rows in rank order; backward reduce-scatters.
    Tensor gathered = Tensor::empty({N, C}, DType::F32);
    gather_from_sequence_parallel_region(g, gathered, rank_tensor(r, rows, r * rows));
    expect_elems("gather forward", gathered, [&](int64_t i) { return value(static_cast<int>(i / (rows * C)), i); });
    Tensor dshard = Tensor::empty({rows, C}, DType::F32);
    gather_from_sequence_parallel_region_backward(g, dshard, rank_tensor(r, N));
    expect_elems("gather backward", dshard, [&](int64_t i) { return sum_over(tp, r * rows * C + i); });

    // reduce-scatter: this rank's rows of the sum; backward all-gathers.
    Tensor shard = Tensor::empty({rows, C}, DType::F32);
    reduce_scatter_to_sequence_parallel_region(g, shard, rank_tensor(r, N));
    expect_elems("reduce_scatter forward", shard, [&](int64_t i) { return sum_over(tp, r * rows * C + i); });
    Tensor dgathered = Tensor::empty({N, C}, DType::F32);
    reduce_scatter_to_sequence_parallel_region_backward(g, dgathered, rank_tensor(r, rows, r * rows));
    expect_elems("reduce_scatter backward", dgathered,
                 [&](int64_t i) { return value(static_cast<int>(i / (rows * C)), i); });

    // The plain all-reduce, with MAX (the cross-entropy's row max).
    Tensor m = rank_tensor(r, N);
    tensor_model_parallel_all_reduce(g, m, comm::ReduceOp::Max);
    expect_elems("all-reduce max", m, [&](int64_t i) { return value(tp - 1, i); });
  });
}

TEST(TpRegions, Tp2) { check(2); }
TEST(TpRegions, Tp4) { check(4); }

TEST(TpRegions, NoGroupIsTheFastPath) {
  Tensor x = rank_tensor(1, N), before = rank_tensor(1, N);
  copy_to_tensor_model_parallel_region_backward(nullptr, x);
  reduce_from_tensor_model_parallel_region(nullptr, x);
  tensor_model_parallel_all_reduce(nullptr, x, comm::ReduceOp::Max);
  expect_elems("no-op", x, [&](int64_t i) { return before.data<float>()[i]; });
  EXPECT_EQ(scatter_to_sequence_parallel_region(nullptr, x).raw(), x.raw());
  Tensor y = Tensor::empty({N, C}, DType::F32);
  gather_from_sequence_parallel_region(nullptr, y, x);  // one rank: a copy
  expect_elems("gather at tp 1", y, [&](int64_t i) { return value(1, i); });
  Tensor z = Tensor::empty({N, C}, DType::F32);
  reduce_scatter_to_sequence_parallel_region(nullptr, z, x);
  expect_elems("reduce_scatter at tp 1", z, [&](int64_t i) { return value(1, i); });
}

}  // namespace
}  // namespace tripod
