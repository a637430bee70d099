// Each tensor-/sequence-parallel comm point, forward and backward, in
// isolation against the unsplit computation (threads as ranks over a
// HashStore and the Gloo communicator):
//   column-parallel linear  Y_r = X A_r^T     enter()  / enter_backward()  (f: copy_to / its all-reduce)
//   row-parallel linear     Y = sum_r X_r B_r^T exit() / exit_backward()    (g: reduce_from / identity)
//   with sequence parallelism: gather rows / reduce-scatter rows.
// Every rank's result is compared with one process computing the whole
// product on the same data (f64 matmuls from the CPU backend).
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "comm/context.h"
#include "model/param_table.h"
#include "model/tp_points.h"
#include "parallel/groups.h"
#include "testing/tensor_close.h"
#include "testing/threads_as_ranks.h"

namespace tripod {
namespace {

using namespace std::chrono_literals;

void run_ranks(int world, const std::function<void(int, comm::DistContext&)>& fn) {
  testing::run_ranks(world, 20s, fn);
}

Tensor randn(const Shape& s, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n;
  Tensor t = Tensor::empty(s, DType::F32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = n(g);
  return t;
}

Tensor matmul(const Tensor& x, const Tensor& w) {  // (N,C) @ (OC,C)^T
  auto be = backend::make_cpu_backend();
  Tensor o = Tensor::empty({x.size(0), w.size(0)}, DType::F32);
  be->matmul_forward(o, x, w, nullptr);
  return o;
}
Tensor matmul_dinp(const Tensor& dy, const Tensor& w) {  // dY (N,OC) @ W (OC,C)
  auto be = backend::make_cpu_backend();
  Tensor dx = Tensor::empty({dy.size(0), w.size(1)}, DType::F32);
  be->matmul_backward(&dx, nullptr, nullptr, dy, /*inp: only its shape is read*/ dx, w);
  return dx;
}

void expect_close(const char* what, const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  testing::expect_close(what, got.data<float>(), want.data<float>(), static_cast<size_t>(got.numel()), 1e-5);
}

constexpr int64_t N = 8, C = 12, OC = 8;

void check_layout(int tp, bool sp) {
  // Unsplit reference.
  const Tensor X = randn({N, C}, 1), A = randn({OC, C}, 2), B = randn({C, OC}, 3);
  const Tensor dYcol = randn({N, OC}, 4), dYrow = randn({N, C}, 5);
  const Tensor Ycol = matmul(X, A), dXcol = matmul_dinp(dYcol, A);
  const Tensor H = randn({N, OC}, 6), Yrow = matmul(H, B), dH = matmul_dinp(dYrow, B);
  run_ranks(tp, [&](int r, comm::DistContext& ctx) {
    auto pg = parallel::make_process_groups(ctx, parallel::Layout::make(tp, tp, 1));
    model::TpPoints pts{pg.tp.get(), sp};
    const int64_t rows = sp ? N / tp : N;
    Tensor full_a = Tensor::empty({N, C}, DType::F32), shard = Tensor::empty({rows, C}, DType::F32);
    // Column-parallel: this rank's input (a row shard under SP), its rows of A.
    Tensor x_local = sp ? X.narrow(r * rows, rows) : X;
    const Tensor& x_in = pts.enter(x_local, full_a);
    expect_close("enter (copy_to / gather) forward", x_in, X);
    Tensor a_r = model::take_shard(A, model::ShardDim::Rows, tp, r);
    Tensor y_r = matmul(x_in, a_r);
    expect_close("column-parallel output shard", y_r, model::take_shard(Ycol, model::ShardDim::Cols, tp, r));
    Tensor dy_r = model::take_shard(dYcol, model::ShardDim::Cols, tp, r);
    Tensor dx_partial = matmul_dinp(dy_r, a_r);
    const Tensor& dx = pts.enter_backward(dx_partial, shard);
    expect_close("enter backward (all-reduce / reduce-scatter)", dx, sp ? dXcol.narrow(r * rows, rows) : dXcol);

    // Row-parallel: this rank's columns of H and of B; partial products summed.
    Tensor h_r = model::take_shard(H, model::ShardDim::Cols, tp, r);
    Tensor b_r = model::take_shard(B, model::ShardDim::Cols, tp, r);
    Tensor partial = matmul(h_r, b_r);
    Tensor& y = pts.exit(partial, shard);
    expect_close("exit (reduce_from / reduce-scatter) forward", y, sp ? Yrow.narrow(r * rows, rows) : Yrow);
    Tensor dy_local = sp ? dYrow.narrow(r * rows, rows) : dYrow;
    const Tensor& dy_full = pts.exit_backward(dy_local, full_a);
    expect_close("exit backward (identity / all-gather)", dy_full, dYrow);
    Tensor dh_r = matmul_dinp(dy_full, b_r);
    expect_close("row-parallel input gradient shard", dh_r, model::take_shard(dH, model::ShardDim::Cols, tp, r));
  });
}

TEST(TpRegions, Tp2) { check_layout(2, false); }
TEST(TpRegions, Tp4) { check_layout(4, false); }
TEST(TpRegions, Tp2SequenceParallel) { check_layout(2, true); }
TEST(TpRegions, Tp4SequenceParallel) { check_layout(4, true); }

}  // namespace
}  // namespace tripod
