// Threads as ranks over one HashStore (c10d's pattern): the Gloo
// communicator's collectives on every group of a TP2 x PP2 x DP2 layout with
// analytic results, other dtypes, p2p tags, timeouts that name the rank that
// never arrived, abort, and the flight recorder.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <thread>

#include <cstring>

#include "base/error.h"
#include "comm/context.h"
#include "parallel/groups.h"
#include "parallel/groups_check.h"
#include "testing/threads_as_ranks.h"

using namespace tripod;
using namespace std::chrono_literals;

using tripod::testing::run_ranks;

TEST(GlooCollectives, EveryGroupOfTp2Pp2Dp2) {
  std::atomic<int64_t> ops{0};
  run_ranks(8, 20s, [&](int rank, comm::DistContext& ctx) {
    auto pg = parallel::make_process_groups(ctx, parallel::Layout::make(8, 2, 2));
    auto rep = parallel::check_process_groups(pg, {1, 3, 1000, 65539});
    EXPECT_EQ(rep.groups_checked, 6);  // world, tp, dp, pp, mp, embd (pp=2: every rank)
    ops += rep.ops_checked;
  });
  EXPECT_EQ(ops.load(), 8 * 6 * 4 * 7);
}

// The device-buffer path of the check (what `bench comm --check --device
// cuda` takes), here with host "device" buffers: the values go through the
// copies both ways, and a copy that loses them fails the check.
TEST(GlooCollectives, CheckThroughDeviceCopies) {
  std::atomic<int64_t> copies{0};
  run_ranks(4, 20s, [&](int rank, comm::DistContext& ctx) {
    auto pg = parallel::make_process_groups(ctx, parallel::Layout::make(4, 2, 1));
    parallel::CheckDevice dev{Device::cpu(), [&](Tensor& d, const Tensor& s) {
                                std::memcpy(d.raw(), s.raw(), size_t(s.numel()) * 4);
                                ++copies;
                              },
                              [] {}};
    auto rep = parallel::check_process_groups(pg, {1, 1000}, &dev);
    EXPECT_EQ(rep.groups_checked, 6);  // world, tp, dp, pp, mp, embd (pp 1: every rank is first and last)
  });
  EXPECT_GT(copies.load(), 0);
  std::atomic<int> failed{0};
  run_ranks(2, 20s, [&](int rank, comm::DistContext& ctx) {
    auto pg = parallel::make_process_groups(ctx, parallel::Layout::make(2, 1, 1));
    parallel::CheckDevice lossy{Device::cpu(), [](Tensor& d, const Tensor& s) {
                                  std::memcpy(d.raw(), s.raw(), size_t(s.numel()) * 4);
                                  if (d.numel() > 0) d.data<float>()[0] += 1.f;  // a wrong byte on the way
                                },
                                [] {}};
    try {
      parallel::check_process_groups(pg, {8}, &lossy);
    } catch (const Error& e) {
      ++failed;
    }
  });
  EXPECT_EQ(failed.load(), 2);
}

TEST(GlooCollectives, OtherDtypes) {
  run_ranks(3, 10s, [](int rank, comm::DistContext& ctx) {
    auto w = ctx.world();
    Tensor d = Tensor::empty({5}, DType::F64);
    Tensor i = Tensor::empty({5}, DType::I32);
    Tensor b = Tensor::empty({5}, DType::BF16);
    for (int k = 0; k < 5; ++k) {
      d.data<double>()[k] = 0.5 * (rank + 1) * k;
      i.data<int32_t>()[k] = (rank + 1) * 100000 + k;
      b.data_u16()[k] = f32_to_bf16(float(rank + 1));
    }
    w->all_reduce(d)->wait();
    w->all_reduce(i, {comm::ReduceOp::Max})->wait();
    w->all_reduce(b)->wait();
    for (int k = 0; k < 5; ++k) {
      EXPECT_EQ(d.data<double>()[k], 0.5 * 6 * k);
      EXPECT_EQ(i.data<int32_t>()[k], 300000 + k);
      EXPECT_EQ(bf16_to_f32(b.data_u16()[k]), 6.0f);
    }
  });
}

TEST(GlooCollectives, SendRecvMatchesTagsAndAsyncOverlap) {
  run_ranks(2, 10s, [](int rank, comm::DistContext& ctx) {
    auto w = ctx.world();
    Tensor a = Tensor::empty({4}, DType::F32), b = Tensor::empty({4}, DType::F32);
    const int peer = 1 - rank;
    if (rank == 0) {
      for (int k = 0; k < 4; ++k) a.data<float>()[k] = 10.0f + k, b.data<float>()[k] = 20.0f + k;
      // Posted in the opposite order of the receives: tags keep them apart.
      auto w1 = w->send(b, peer, {2});
      auto w2 = w->send(a, peer, {1});
      w1->wait();
      w2->wait();
    } else {
      auto r1 = w->recv(a, peer, {1});
      auto r2 = w->recv(b, peer, {2});
      r1->wait();
      r2->wait();
      EXPECT_EQ(a.data<float>()[3], 13.0f);
      EXPECT_EQ(b.data<float>()[0], 20.0f);
    }
    // Several collectives in flight at once complete in order.
    std::vector<Tensor> ts;
    std::vector<std::shared_ptr<comm::Work>> ws;
    for (int k = 0; k < 6; ++k) {
      ts.push_back(Tensor::empty({100}, DType::F32));
      for (int e = 0; e < 100; ++e) ts.back().data<float>()[e] = float(k + rank);
      ws.push_back(w->all_reduce(ts.back()));
    }
    for (int k = 0; k < 6; ++k) {
      ws[size_t(k)]->wait();
      EXPECT_TRUE(ws[size_t(k)]->is_completed());
      EXPECT_EQ(ts[size_t(k)].data<float>()[99], float(2 * k + 1));
    }
  });
}

TEST(GlooCollectives, TimeoutNamesTheRankThatNeverArrived) {
  std::atomic<bool> done{false};
  std::string message;
  double seconds = 0;
  run_ranks(3, 10s, [&](int rank, comm::DistContext& ctx) {
    auto w = ctx.world();
    Tensor t = Tensor::zeros({8}, DType::F32);
    w->all_reduce(t)->wait();  // one that completes, for the recorder
    if (rank == 2) {  // alive, but never joins the next collective
      while (!done) std::this_thread::sleep_for(10ms);
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    try {
      w->all_reduce(t, {comm::ReduceOp::Sum, 800ms})->wait();
      ADD_FAILURE() << "all_reduce without rank 2 completed";
    } catch (const TimeoutError& e) {
      if (rank == 0) {
        message = e.what();
        seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        auto entries = ctx.recorder()->entries();
        ASSERT_GE(entries.size(), 2u);
        EXPECT_EQ(entries.back().state, comm::OpState::Failed);
        EXPECT_EQ(entries.back().op, "all_reduce");
        EXPECT_EQ(entries[entries.size() - 2].state, comm::OpState::Completed);
      }
    }
    if (rank == 0) done = true;
  });
  EXPECT_NE(message.find("timed out"), std::string::npos) << message;
  EXPECT_NE(message.find("[2]"), std::string::npos) << message;
  EXPECT_NE(message.find("world"), std::string::npos) << message;
  EXPECT_LT(seconds, 6.0);
}

TEST(GlooCollectives, AbortFailsQueuedWork) {
  run_ranks(2, 10s, [](int rank, comm::DistContext& ctx) {
    auto w = ctx.world();
    Tensor t = Tensor::zeros({4}, DType::F32);
    w->all_reduce(t)->wait();
    ctx.abort();
    EXPECT_THROW(w->all_reduce(t), Error);
  });
}

TEST(FlightRecorder, RingKeepsTheNewestInOrder) {
  comm::FlightRecorder rec(4);
  for (int i = 0; i < 6; ++i) {
    auto id = rec.record("tp", uint64_t(i + 1), "all_reduce", size_t(i) * 4);
    rec.started(id);
    if (i < 5) rec.finished(id, true);
  }
  auto e = rec.entries();
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e.front().group_seq, 3u);
  EXPECT_EQ(e.back().group_seq, 6u);
  EXPECT_EQ(e.back().state, comm::OpState::Started);
  EXPECT_EQ(e[2].state, comm::OpState::Completed);
  EXPECT_NE(rec.dump().find("started"), std::string::npos);
}

// all_to_all_v with uneven counts, a rank that sends nothing to a peer, and
// one that receives nothing at all; the chunk a rank keeps stays the caller's.
TEST(GlooCollectives, AllToAllVUnevenCountsAndEmptyPeers) {
  run_ranks(4, 20s, [](int rank, comm::DistContext& ctx) {
    auto w = ctx.world();
    const int n = 4;
    // Rank r sends (r + d) % 3 elements to rank d, except nothing to rank 3 from rank 0
    // and nothing at all to rank 2; element values 1000 r + 10 d + i.
    auto count = [](int r, int d) -> int64_t { return d == 2 || (r == 0 && d == 3) ? 0 : (r + d) % 3 + 1; };
    std::vector<int64_t> sc(n), rc(n);
    for (int d = 0; d < n; ++d) sc[d] = count(rank, d), rc[d] = count(d, rank);
    int64_t ns = 0, nr = 0;
    for (int d = 0; d < n; ++d) ns += sc[d], nr += rc[d];
    Tensor in = Tensor::empty({std::max<int64_t>(ns, 1)}, DType::F32), out = Tensor::empty({std::max<int64_t>(nr, 1)}, DType::F32);
    for (int64_t i = 0, d = 0, at = 0; d < n; ++d)
      for (i = 0; i < sc[d]; ++i) in.data<float>()[at++] = float(1000 * rank + 10 * d + i);
    for (int64_t i = 0; i < out.numel(); ++i) out.data<float>()[i] = -1;
    w->all_to_all_v(out, in, sc, rc)->wait();
    for (int64_t s = 0, at = 0; s < n; ++s)
      for (int64_t i = 0; i < rc[s]; ++i, ++at)
        EXPECT_EQ(out.data<float>()[at], s == rank ? -1.f : float(1000 * s + 10 * rank + i)) << rank << " from " << s;
  });
}
