// The tensor-parallel layers of model/tensor_parallel.h, each in isolation
// against the unsplit computation on the same data (threads as ranks over a
// HashStore and the Gloo communicator), with and without sequence
// parallelism:
//   ColumnParallelLinear   Y_r = X A_r^T + a_r      output shard, dX (summed), dA_r, da_r
//   RowParallelLinear      Y = sum_r X_r B_r^T + b  output (rows under SP), dX_r, dB_r, db
//   VocabParallelEmbedding word rows by vocab range, positions once
//   VocabParallelCrossEntropy  losses and dlogits from vocab-sharded logits
// Every rank's result is compared with one process computing the whole
// thing with the CPU backend.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "model/tensor_parallel.h"
#include "parallel/groups.h"
#include "testing/tensor_close.h"
#include "testing/threads_as_ranks.h"

namespace tripod {
namespace {

using namespace std::chrono_literals;
using model::ShardDim;

Tensor randn(const Shape& s, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n;
  Tensor t = Tensor::empty(s, DType::F32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = n(g);
  return t;
}
Tensor zeros(const Shape& s) { return Tensor::zeros(s, DType::F32); }

// This rank's parameter: its shard of `full` as value and compute weight, a zero gradient.
model::Param shard_param(const Tensor& full, ShardDim shard, int tp, int r) {
  model::Param p;
  p.value = model::take_shard(full, shard, tp, r);
  p.compute = p.value;
  p.shape = p.value.shape();
  p.grad = zeros(p.shape);
  return p;
}

void expect_close(const char* what, const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  testing::expect_close(what, got.data<float>(), want.data<float>(), static_cast<size_t>(got.numel()), 1e-5);
}
Tensor rows_of(const Tensor& t, bool sp, int tp, int r) { return sp ? t.narrow(r * (t.size(0) / tp), t.size(0) / tp) : t; }

constexpr int64_t kB = 2, kT = 4, N = kB * kT, C = 12, OC = 8, V = 16;

void check_linears(int tp, bool sp) {
  auto be = backend::make_cpu_backend();
  // Unsplit references.
  const Tensor X = randn({N, C}, 1), A = randn({OC, C}, 2), a = randn({OC}, 3), dYc = randn({N, OC}, 4);
  Tensor Yc = zeros({N, OC}), dXc = zeros({N, C}), dA = zeros({OC, C}), da = zeros({OC});
  be->matmul_forward(Yc, X, A, &a);
  be->matmul_backward(&dXc, &dA, &da, dYc, X, A);
  const Tensor H = randn({N, OC}, 5), Bw = randn({C, OC}, 6), b = randn({C}, 7), dYr = randn({N, C}, 8);
  Tensor Yr = zeros({N, C}), dH = zeros({N, OC}), dB = zeros({C, OC}), db = zeros({C});
  be->matmul_forward(Yr, H, Bw, &b);
  be->matmul_backward(&dH, &dB, &db, dYr, H, Bw);

  testing::run_ranks(tp, 20s, [&](int r, comm::DistContext& ctx) {
    auto rbe = backend::make_cpu_backend();
    auto pg = parallel::make_process_groups(ctx, parallel::Layout::make(tp, tp, 1));
    const model::TpContext tpc{pg.tp.get(), sp};
    const int64_t rows = sp ? N / tp : N;
    Tensor full_a = zeros({N, C}), full_b = zeros({N, C}), shard = zeros({rows, C});

    using Col = model::ColumnParallelLinear;
    model::Param pA = shard_param(A, Col::kWeightShard, tp, r), pa = shard_param(a, Col::kBiasShard, tp, r);
    Col col(&pA, &pa, tpc);
    Tensor y = zeros({N, OC / tp});
    const Tensor x_local = rows_of(X, sp, tp, r);  // forward returns it (or full_a): keep it alive
    const Tensor& x_full = col.forward(*rbe, y, x_local, full_a);
    expect_close("column input (copy_to / gather)", x_full, X);
    expect_close("column output shard", y, model::take_shard(Yc, ShardDim::Cols, tp, r));
    const Tensor& dx = col.backward(*rbe, model::take_shard(dYc, ShardDim::Cols, tp, r), x_full, full_b, shard);
    expect_close("column dX (all-reduce / reduce-scatter)", dx, rows_of(dXc, sp, tp, r));
    expect_close("column dA shard", pA.grad, model::take_shard(dA, Col::kWeightShard, tp, r));
    expect_close("column da shard", pa.grad, model::take_shard(da, Col::kBiasShard, tp, r));

    using Row = model::RowParallelLinear;
    model::Param pB = shard_param(Bw, Row::kWeightShard, tp, r), pb = shard_param(b, Row::kBiasShard, tp, r);
    Row row(&pB, &pb, tpc);
    Tensor h_r = model::take_shard(H, ShardDim::Cols, tp, r);
    Tensor& out = row.forward(*rbe, h_r, full_b, shard);
    expect_close("row output (reduce_from / reduce-scatter)", out, rows_of(Yr, sp, tp, r));
    Tensor dh = zeros({N, OC / tp});
    row.backward(*rbe, dh, rows_of(dYr, sp, tp, r), h_r, full_a);
    expect_close("row dX shard", dh, model::take_shard(dH, ShardDim::Cols, tp, r));
    expect_close("row dB shard", pB.grad, model::take_shard(dB, Row::kWeightShard, tp, r));
    expect_close("row db (complete on every rank)", pb.grad, db);
  });
}

void check_embedding_and_loss(int tp, bool sp) {
  auto be = backend::make_cpu_backend();
  const Tensor W = randn({V, C}, 11), P = randn({kT, C}, 12), dOut = randn({N, C}, 13);
  Tensor tokens = Tensor::empty({kB, kT}, DType::I32), targets = Tensor::empty({N}, DType::I32);
  for (int64_t i = 0; i < N; ++i) {
    tokens.data<int32_t>()[i] = static_cast<int32_t>((i * 7 + 3) % V);
    targets.data<int32_t>()[i] = static_cast<int32_t>((i * 5 + 1) % V);
  }
  Tensor E = zeros({kB, kT, C}), dW = zeros({V, C}), dP = zeros({kT, C});
  be->embedding_forward(E, tokens, W, &P, 0);
  be->embedding_backward(&dW, &dP, dOut.view({kB, kT, C}), tokens, 0);
  const Tensor L = randn({N, V}, 14);
  Tensor losses = zeros({N}), dL = zeros({N, V}), mx = zeros({N}), sums = zeros({2, N});
  const model::VocabParallelCrossEntropy ce1;
  ce1.forward(*be, losses, L, targets, 0, mx, sums);
  ce1.backward(*be, dL, L, targets, 0, mx, sums, 0.5f);

  testing::run_ranks(tp, 20s, [&](int r, comm::DistContext& ctx) {
    auto rbe = backend::make_cpu_backend();
    auto pg = parallel::make_process_groups(ctx, parallel::Layout::make(tp, tp, 1));
    const model::TpContext tpc{pg.tp.get(), sp};
    const int64_t rows = sp ? N / tp : N;
    model::Param pw = shard_param(W, model::VocabParallelEmbedding::kWeightShard, tp, r);
    model::Param pp = shard_param(P, ShardDim::None, tp, r);
    model::VocabParallelEmbedding emb(&pw, &pp, tpc);
    EXPECT_EQ(emb.vocab_start(), r * (V / tp));
    Tensor out = zeros({rows, C}), full = zeros({N, C});
    emb.forward(*rbe, out, tokens, full);
    expect_close("embedding output", out, rows_of(E.view({N, C}), sp, tp, r));
    emb.backward(*rbe, rows_of(dOut, sp, tp, r), tokens, full);
    expect_close("word embedding grad shard", pw.grad, model::take_shard(dW, ShardDim::Rows, tp, r));
    expect_close("position embedding grad (complete on every rank)", pp.grad, dP);

    const model::VocabParallelCrossEntropy ce(tpc);
    Tensor logits = model::take_shard(L, ShardDim::Cols, tp, r);
    Tensor my_losses = zeros({N}), my_max = zeros({N}), my_sums = zeros({2, N});
    ce.forward(*rbe, my_losses, logits, targets, emb.vocab_start(), my_max, my_sums);
    expect_close("vocab-parallel losses", my_losses, losses);
    ce.backward(*rbe, logits, logits, targets, emb.vocab_start(), my_max, my_sums, 0.5f);
    expect_close("vocab-parallel dlogits shard", logits, model::take_shard(dL, ShardDim::Cols, tp, r));
  });
}

TEST(TensorParallel, LinearsTp1) { check_linears(1, false); }
TEST(TensorParallel, LinearsTp2) { check_linears(2, false); }
TEST(TensorParallel, LinearsTp4) { check_linears(4, false); }
TEST(TensorParallel, LinearsTp2SequenceParallel) { check_linears(2, true); }
TEST(TensorParallel, LinearsTp4SequenceParallel) { check_linears(4, true); }
TEST(TensorParallel, EmbeddingAndCrossEntropyTp2) { check_embedding_and_loss(2, false); }
TEST(TensorParallel, EmbeddingAndCrossEntropyTp4SequenceParallel) { check_embedding_and_loss(4, true); }

}  // namespace
}  // namespace tripod
