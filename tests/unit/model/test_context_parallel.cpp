// Context parallelism's pieces (model/context_parallel.h): the load-balanced
// chunk positions, the ring's block table, the ring attention against
// attention on the whole sequence (threads as ranks over Gloo, f64, MHA and
// GQA, cp 2 and 4), the head all-to-all's maps, the all-to-all and the K/V
// all-gather against the same, and the ring's schedule: the next block's send and
// receive are posted before the block in hand is computed.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <random>
#include <utility>

#include "backend/cpu/cpu_backend.h"
#include "base/error.h"
#include "model/context_parallel.h"
#include "parallel/groups.h"
#include "testing/threads_as_ranks.h"

namespace tripod {
namespace {

using namespace std::chrono_literals;
using model::CpChunks;

std::vector<int64_t> positions(int cp, int r, int64_t T) {
  const CpChunks ch{cp, r, T};
  std::vector<int64_t> p;
  for (int64_t t = 0; t < ch.local_length(); ++t) p.push_back(ch.position(t));
  return p;
}

// Megatron's get_batch_on_this_cp_rank: 2*cp chunks, rank r holds r and 2cp-1-r.
TEST(ContextParallel, LoadBalancedChunkPositions) {
  EXPECT_EQ(positions(1, 0, 6), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(positions(2, 0, 8), (std::vector<int64_t>{0, 1, 6, 7}));
  EXPECT_EQ(positions(2, 1, 8), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(positions(4, 1, 16), (std::vector<int64_t>{2, 3, 12, 13}));
  EXPECT_EQ(positions(4, 3, 16), (std::vector<int64_t>{6, 7, 8, 9}));
}

TEST(ContextParallel, SequenceLengthMustSplitIntoChunks) {
  model::check_context_parallel_seq_length(32, 4);
  try {
    model::check_context_parallel_seq_length(36, 4);
    ADD_FAILURE() << "36 tokens accepted at cp 4";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--seq-length 36"), std::string::npos) << m;
    EXPECT_NE(m.find("--context-parallel-size 4"), std::string::npos) << m;
  }
}

// NOTE [Ring schedule]: which rows of each pair meet, at cp 4 with 8 local rows.
TEST(ContextParallel, RingBlocks) {
  auto str = [](const backend::AttentionBlock& b) {
    return std::to_string(b.q_start) + "+" + std::to_string(b.q_len) + " " + std::to_string(b.kv_start) + "+" +
           std::to_string(b.kv_len) + (b.causal ? " causal" : "");
  };
  // rank 2: step 0 own (causal), steps 1, 2 from ranks 1, 0 (earlier: all q vs early kv),
  // step 3 from rank 3 (later: late q vs all kv).
  EXPECT_EQ(str(model::ring_block(2, 4, 0, 8)), "0+8 0+8 causal");
  EXPECT_EQ(str(model::ring_block(2, 4, 1, 8)), "0+8 0+4");
  EXPECT_EQ(str(model::ring_block(2, 4, 2, 8)), "0+8 0+4");
  EXPECT_EQ(str(model::ring_block(2, 4, 3, 8)), "4+4 0+8");
  EXPECT_EQ(str(model::ring_block(0, 4, 1, 8)), "4+4 0+8");
}

// A communicator that records when sends and receives are posted and waited for.
class Recording final : public comm::Communicator {
 public:
  Recording(std::shared_ptr<comm::Communicator> inner, std::vector<std::string>* log, bool waits = false)
      : in_(std::move(inner)), log_(log), waits_(waits) {}
  int rank() const override { return in_->rank(); }
  int size() const override { return in_->size(); }
  const std::string& name() const override { return in_->name(); }
  std::shared_ptr<comm::Work> all_reduce(Tensor& t, const comm::AllReduceOptions& o) override { return in_->all_reduce(t, o); }
  std::shared_ptr<comm::Work> all_gather(Tensor& out, const Tensor& in, const comm::AllGatherOptions& o) override {
    return in_->all_gather(out, in, o);
  }
  std::shared_ptr<comm::Work> reduce_scatter(Tensor& out, const Tensor& in, const comm::ReduceScatterOptions& o) override {
    return in_->reduce_scatter(out, in, o);
  }
  std::shared_ptr<comm::Work> broadcast(Tensor& t, const comm::BroadcastOptions& o) override { return in_->broadcast(t, o); }
  std::shared_ptr<comm::Work> send(const Tensor& t, int dst, const comm::SendOptions& o) override {
    log_->push_back(tag_name(o.tag) + " send");
    return logged(in_->send(t, dst, o), tag_name(o.tag) + " send done");
  }
  std::shared_ptr<comm::Work> recv(Tensor& t, int src, const comm::RecvOptions& o) override {
    log_->push_back(tag_name(o.tag) + " recv");
    return logged(in_->recv(t, src, o), tag_name(o.tag) + " recv done");
  }
  void barrier(const comm::BarrierOptions& o) override { in_->barrier(o); }
  void abort() noexcept override { in_->abort(); }

 private:
  // With waits: each point-to-point Work logs `what` when it is waited for.
  struct LoggedWork final : comm::Work {
    std::shared_ptr<comm::Work> in;
    std::vector<std::string>* log;
    std::string what;
    void wait() override {
      in->wait();
      log->push_back(what);
    }
    bool is_completed() override { return in->is_completed(); }
  };
  std::shared_ptr<comm::Work> logged(std::shared_ptr<comm::Work> w, std::string what) {
    if (!waits_) return w;
    auto l = std::make_shared<LoggedWork>();
    l->in = std::move(w);
    l->log = log_;
    l->what = std::move(what);
    return l;
  }
  static std::string tag_name(int tag) { return tag == model::kCpKvTag ? "kv" : tag == model::kCpDkvTag ? "dkv" : "?"; }
  std::shared_ptr<comm::Communicator> in_;
  std::vector<std::string>* log_;
  bool waits_ = false;
};

Tensor random(const Shape& s, std::mt19937& g) {
  Tensor t = Tensor::empty(s, DType::F64);
  std::normal_distribution<double> d(0.0, 1.0);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = d(g);
  return t;
}

// Rows of a (B, T, W) tensor at the given positions of each batch row.
Tensor rows_at(const Tensor& full, const std::vector<int64_t>& pos) {
  const int64_t B = full.size(0), T = full.size(1), W = full.size(2), Tl = static_cast<int64_t>(pos.size());
  Tensor out = Tensor::empty({B, Tl, W}, full.dtype());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tl; ++t)
      for (int64_t e = 0; e < W; ++e)
        out.data<double>()[(b * Tl + t) * W + e] = full.data<double>()[(b * T + pos[size_t(t)]) * W + e];
  return out;
}

void expect_rows(const char* what, const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.numel(), want.numel());
  for (int64_t i = 0; i < got.numel(); ++i)
    ASSERT_NEAR(got.data<double>()[i], want.data<double>()[i], 1e-12) << what << " element " << i;
}

// The ring's out, lse and dqkv are attention_forward/backward's on the whole sequence, row for row.
// Random qkv and d out of B = 2 sequences of T = 8 cp tokens (head size 4),
// and attention_forward/backward's out, lse and dqkv over them, in f64.
struct WholeSequence {
  int64_t B = 2, T, HS = 4, W;
  Tensor qkv, dout, out, lse, dqkv;
  WholeSequence(int cp, int NH, int G, unsigned seed) : T(8 * cp), W((NH + 2 * G) * 4) {
    auto be = backend::make_cpu_backend();
    std::mt19937 g(seed);
    qkv = random({B, T, W}, g), dout = random({B, T, NH * HS}, g);
    out = Tensor::empty({B, T, NH * HS}, DType::F64), lse = Tensor::empty({B, NH, T}, DType::F64);
    dqkv = Tensor::empty({B, T, W}, DType::F64);
    be->attention_forward(out, lse, qkv, NH, G);
    be->attention_backward(dqkv, dout, qkv, out, lse, NH, G);
  }
};

void check_ring(int cp, int NH, int G) {
  const WholeSequence w(cp, NH, G, 11);
  const int64_t B = w.B, T = w.T, HS = w.HS, W = w.W;
  const Tensor &qkv = w.qkv, &dout = w.dout, &out = w.out, &lse = w.lse, &dqkv = w.dqkv;
  testing::run_ranks(cp, 30s, [&](int r, comm::DistContext& ctx) {
    auto pg = parallel::make_process_groups(ctx, parallel::Layout::make(cp, 1, 1, 1, cp));
    auto rbe = backend::make_cpu_backend();
    const std::vector<int64_t> pos = positions(cp, r, T);
    const int64_t Tl = T / cp;
    const Tensor q = rows_at(qkv, pos), dl = rows_at(dout, pos);
    Tensor o = Tensor::empty({B, Tl, NH * HS}, DType::F64), l = Tensor::empty({B, NH, Tl}, DType::F64);
    Tensor dq = Tensor::empty({B, Tl, W}, DType::F64);
    model::RingBuffers buf;
    for (Tensor* k : {&buf.kv[0], &buf.kv[1], &buf.dkv[0], &buf.dkv[1], &buf.dkv_block})
      *k = Tensor::empty({B, Tl, 2 * G * HS}, DType::F64);
    const model::RingAttention ring(*pg.cp, *rbe, NH, G);
    ring.forward(o, l, q, buf);
    ring.backward(dq, dl, q, o, l, buf);
    expect_rows("out", o, rows_at(out, pos));
    expect_rows("dqkv", dq, rows_at(dqkv, pos));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < NH; ++h)
        for (int64_t t = 0; t < Tl; ++t)
          ASSERT_NEAR(l.data<double>()[(b * NH + h) * Tl + t], lse.data<double>()[(b * NH + h) * T + pos[size_t(t)]],
                      1e-12);
  });
}

// --cp-comm-type a2a and all_gather: out and dqkv of the local rows are the
// whole sequence's (a2a leaves qkv in the head split; its lse is the head
// split's, checked through the backward).
void check_exchange(config::CpCommType type, int cp, int NH, int G) {
  const WholeSequence w(cp, NH, G, 12);
  const int64_t B = w.B, T = w.T, HS = w.HS, W = w.W;
  const Tensor &qkv = w.qkv, &dout = w.dout, &out = w.out, &dqkv = w.dqkv;
  testing::run_ranks(cp, 30s, [&](int r, comm::DistContext& ctx) {
    auto pg = parallel::make_process_groups(ctx, parallel::Layout::make(cp, 1, 1, 1, cp));
    auto rbe = backend::make_cpu_backend();
    const std::vector<int64_t> pos = positions(cp, r, T);
    const int64_t Tl = T / cp;
    Tensor q = rows_at(qkv, pos);
    const Tensor dl = rows_at(dout, pos);
    Tensor o = Tensor::empty({B, Tl, NH * HS}, DType::F64), l = Tensor::empty({B, NH, Tl}, DType::F64);
    Tensor dq = Tensor::empty({B, Tl, W}, DType::F64);
    if (type == config::CpCommType::A2a) {
      model::A2aBuffers buf;
      buf.send = Tensor::empty({B * Tl * W}, DType::F64);
      buf.recv = Tensor::empty({B * Tl * W}, DType::F64);
      buf.att_h = Tensor::empty({B, T, NH / cp * HS}, DType::F64);
      buf.datt_h = Tensor::empty({B, T, NH / cp * HS}, DType::F64);
      const CpChunks ch{cp, r, T};
      buf.qkv = model::HeadExchange::make(*rbe, ch, B, {NH, G, G});
      buf.out = model::HeadExchange::make(*rbe, ch, B, {NH});
      const model::UlyssesAttention a2a(*pg.cp, *rbe, NH, G);
      a2a.forward(o, l, q, true, buf);
      expect_rows("out", o, rows_at(out, pos));
      a2a.backward(dq, dl, q, o, l, buf);
      expect_rows("dqkv", dq, rows_at(dqkv, pos));
      a2a.forward(o, l, q, false, buf);  // selective recompute: from the head split
      expect_rows("recomputed out", o, rows_at(out, pos));
    } else {
      model::AllGatherBuffers buf;
      buf.kv = Tensor::empty({B, Tl, 2 * G * HS}, DType::F64);
      buf.dkv = Tensor::empty({B, Tl, 2 * G * HS}, DType::F64);
      buf.kv_all = Tensor::empty({cp * B * Tl * 2 * G * HS}, DType::F64);
      buf.dkv_all = Tensor::empty({cp * B * Tl * 2 * G * HS}, DType::F64);
      const model::AllGatherAttention ag(*pg.cp, *rbe, NH, G);
      ag.forward(o, l, q, buf);
      ag.backward(dq, dl, q, o, l, buf);
      expect_rows("out", o, rows_at(out, pos));
      expect_rows("dqkv", dq, rows_at(dqkv, pos));
    }
  });
}

// The head split of rank d holds each section's heads [d n/cp, (d+1) n/cp):
// at cp 2, B 1, T 4 (rank 0 holds positions 0 and 3), heads {2, 2}.
TEST(ContextParallel, HeadExchangeMaps) {
  const auto m = model::HeadExchange::host_maps(CpChunks{2, 0, 4}, 1, {2, 2});
  // to heads, pack: (dest d, local row t, slot j) <- local row t's head (0, 2 | 1, 3)
  EXPECT_EQ(m[0], (std::vector<int32_t>{0, 2, 4, 6, 1, 3, 5, 7}));
  // to heads, unpack: positions 0..3 from (rank 0 row 0, rank 1 row 0, rank 1 row 1, rank 0 row 1)
  EXPECT_EQ(m[1], (std::vector<int32_t>{0, 1, 4, 5, 6, 7, 2, 3}));
  // to the sequence, pack: rank d's rows (d 0: positions 0, 3; d 1: 1, 2) of the head split
  EXPECT_EQ(m[2], (std::vector<int32_t>{0, 1, 6, 7, 2, 3, 4, 5}));
  // to the sequence, unpack: local row t's heads 0, 1 (section 0) from ranks 0, 1 at slot 0, heads 2, 3
  // (section 1) from ranks 0, 1 at slot 1
  EXPECT_EQ(m[3], (std::vector<int32_t>{0, 4, 1, 5, 2, 6, 3, 7}));
}

TEST(ContextParallel, AllToAllMatchesWholeSequenceCp2) { check_exchange(config::CpCommType::A2a, 2, 4, 4); }
TEST(ContextParallel, AllToAllMatchesWholeSequenceCp4Gqa) { check_exchange(config::CpCommType::A2a, 4, 8, 4); }
TEST(ContextParallel, AllGatherMatchesWholeSequenceCp4Gqa) { check_exchange(config::CpCommType::AllGather, 4, 6, 2); }

TEST(ContextParallel, AllToAllRefusesHeadsCpDoesNotDivide) {
  EXPECT_NO_THROW(model::check_context_parallel_heads(8, 4, 2, 2));
  try {
    model::check_context_parallel_heads(8, 2, 2, 2);  // 1 K/V head per tp rank
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--cp-comm-type p2p"), std::string::npos) << e.what();
  }
}

// RoPE at a cp rank's positions rotates its rows as RoPE on the whole sequence does, and back.
TEST(ContextParallel, RopeAtChunkPositions) {
  auto be = backend::make_cpu_backend();
  std::mt19937 g(5);
  const int64_t B = 2, T = 16, NH = 4, G = 2, HS = 8, W = (NH + 2 * G) * HS;
  const Tensor orig = random({B, T, W}, g);
  Tensor full = Tensor::empty({B, T, W}, DType::F64);
  be->copy(full, orig);
  be->rope_forward(full, NH, G, 6, 10000.f);
  for (int r = 0; r < 2; ++r) {
    const std::vector<int64_t> pos = positions(2, r, T);
    Tensor local = rows_at(orig, pos), p = Tensor::empty({int64_t(pos.size())}, DType::I32);
    for (size_t i = 0; i < pos.size(); ++i) p.data<int32_t>()[i] = int32_t(pos[i]);
    be->rope_forward(local, NH, G, 6, 10000.f, &p);
    expect_rows("rope", local, rows_at(full, pos));
    be->rope_backward(local, NH, G, 6, 10000.f, &p);
    expect_rows("rope back", local, rows_at(orig, pos));
  }
}

TEST(ContextParallel, RingAttentionMatchesWholeSequenceCp2) { check_ring(2, 4, 4); }
TEST(ContextParallel, RingAttentionMatchesWholeSequenceCp2Gqa) { check_ring(2, 4, 2); }
TEST(ContextParallel, RingAttentionMatchesWholeSequenceCp4Gqa) { check_ring(4, 6, 2); }

// NOTE [Ring schedule]: at every step but the last, the next K/V block's
// receive and send are posted before the block in hand is computed; the
// backward's dK/dV accumulator leaves after its block, cp times in all.
// Even ranks post the send first, odd ranks the receive (an in-order
// point-to-point stream, as NCCL's, cannot wait in a cycle).
TEST(ContextParallel, RingPostsTheNextBlockBeforeComputing) {
  const int cp = 4;
  std::vector<std::vector<std::string>> logs(cp);
  testing::run_ranks(cp, 30s, [&](int r, comm::DistContext& ctx) {
    auto pg = parallel::make_process_groups(ctx, parallel::Layout::make(cp, 1, 1, 1, cp));
    auto rec = std::make_shared<Recording>(pg.cp, &logs[size_t(r)]);
    auto be = backend::make_cpu_backend();
    const int64_t B = 1, Tl = 4, NH = 2, G = 1, HS = 2, W = (NH + 2 * G) * HS;
    std::mt19937 g(r);
    const Tensor q = random({B, Tl, W}, g), dl = random({B, Tl, NH * HS}, g);
    Tensor o = Tensor::empty({B, Tl, NH * HS}, DType::F64), l = Tensor::empty({B, NH, Tl}, DType::F64);
    Tensor dq = Tensor::empty({B, Tl, W}, DType::F64);
    model::RingBuffers buf;
    for (Tensor* k : {&buf.kv[0], &buf.kv[1], &buf.dkv[0], &buf.dkv[1], &buf.dkv_block})
      *k = Tensor::empty({B, Tl, 2 * G * HS}, DType::F64);
    model::RingAttention ring(*rec, *be, NH, G);
    ring.set_trace(&logs[size_t(r)]);
    ring.forward(o, l, q, buf);
    logs[size_t(r)].push_back("--");
    ring.backward(dq, dl, q, o, l, buf);
  });
  const std::vector<std::string> want = {
      "kv recv", "kv send", "block 0", "kv recv", "kv send", "block 1", "kv recv", "kv send", "block 2", "block 3", "--",
      "kv recv", "kv send", "block backward 0", "dkv recv", "dkv send",
      "kv recv", "kv send", "block backward 1", "dkv recv", "dkv send",
      "kv recv", "kv send", "block backward 2", "dkv recv", "dkv send",
      "block backward 3", "dkv recv", "dkv send"};
  for (int r = 0; r < cp; ++r) {
    std::vector<std::string> w = want;
    if (r % 2 == 0)  // send before receive
      for (size_t i = 0; i + 1 < w.size(); ++i)
        if (w[i].ends_with(" recv") && w[i + 1].ends_with(" send")) std::swap(w[i], w[i + 1]);
    EXPECT_EQ(logs[size_t(r)], w) << "rank " << r;
  }
}

// RingAttention::set_overlap (the serialized baseline of `tripod bench cp`):
// with the overlap every forward step but the last computes its block while
// the next block's send and receive are in flight; serialized, nothing is in
// flight when a block's attention starts. Both give the same numbers.
TEST(ContextParallel, SerializedRingWaitsBeforeEachBlockWithTheSameResult) {
  const int cp = 4;
  std::vector<std::vector<std::string>> logs(2 * cp);
  std::vector<std::vector<double>> results(2 * cp);
  testing::run_ranks(cp, 30s, [&](int r, comm::DistContext& ctx) {
    auto pg = parallel::make_process_groups(ctx, parallel::Layout::make(cp, 1, 1, 1, cp));
    auto be = backend::make_cpu_backend();
    const int64_t B = 1, Tl = 4, NH = 2, G = 1, HS = 2, W = (NH + 2 * G) * HS;
    std::mt19937 g(r);
    const Tensor q = random({B, Tl, W}, g), dl = random({B, Tl, NH * HS}, g);
    for (int overlap = 0; overlap < 2; ++overlap) {
      std::vector<std::string>& log = logs[size_t(overlap * cp + r)];
      auto rec = std::make_shared<Recording>(pg.cp, &log, true);
      Tensor o = Tensor::empty({B, Tl, NH * HS}, DType::F64), l = Tensor::empty({B, NH, Tl}, DType::F64);
      Tensor dq = Tensor::empty({B, Tl, W}, DType::F64);
      model::RingBuffers buf;
      for (Tensor* k : {&buf.kv[0], &buf.kv[1], &buf.dkv[0], &buf.dkv[1], &buf.dkv_block})
        *k = Tensor::empty({B, Tl, 2 * G * HS}, DType::F64);
      model::RingAttention ring(*rec, *be, NH, G);
      ring.set_overlap(overlap == 1);
      ring.set_trace(&log);
      ring.forward(o, l, q, buf);
      ring.backward(dq, dl, q, o, l, buf);
      std::vector<double>& res = results[size_t(overlap * cp + r)];
      for (const Tensor* t : {&o, &l, &dq}) res.insert(res.end(), t->data<double>(), t->data<double>() + t->numel());
    }
  });
  for (int r = 0; r < cp; ++r) {
    for (int overlap = 0; overlap < 2; ++overlap) {
      int in_flight = 0, blocks_overlapped = 0, blocks = 0;
      for (const std::string& e : logs[size_t(overlap * cp + r)]) {
        if (e.ends_with(" send") || e.ends_with(" recv")) ++in_flight;
        if (e.ends_with(" done")) --in_flight;
        if (e.starts_with("block")) {
          ++blocks;
          blocks_overlapped += in_flight > 0;
        }
      }
      EXPECT_EQ(in_flight, 0) << "rank " << r << ": every pass is waited for";
      EXPECT_EQ(blocks, 2 * cp);
      if (overlap) EXPECT_GE(blocks_overlapped, cp - 1) << "rank " << r << ": the ring overlaps its forward passes";
      else EXPECT_EQ(blocks_overlapped, 0) << "rank " << r << ": serialized, no block starts with a pass in flight";
    }
    EXPECT_EQ(results[size_t(r)], results[size_t(cp + r)]) << "rank " << r;
  }
}

}  // namespace
}  // namespace tripod
