// Event simulation of the schedules' p2p, with no threads: each pp rank's
// body runs through a driver that records its compute steps and
// communicate() calls, then a simulator replays all ranks with rendezvous
// semantics (a send completes when the peer has posted the matching recv,
// as Gloo's and NCCL's p2p do) and zero latency. It checks, for many P, m, v:
//  - no deadlock (some rank can always progress);
//  - every message lands where it belongs: the activation of virtual stage s
//    for micro-batch m is received as the input of stage s+1 for m, and
//    likewise for gradients (streams match in posting order per peer and tag);
//  - the bubble on pp rank 0 (first to start, last to finish) equals the
//    theory: (P-1)/m for 1F1B, (P-1)/(v m) interleaved, with backward = 2x forward.
// The neighbour and first/last-stage rules are restated here from
// docs/pipeline.md rather than taken from the code under test.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <tuple>

#include "parallel/pp_schedule.h"

using namespace tripod::parallel;
using detail::MbChunk;

namespace {

struct Op {
  int peer, tag;  // tag 0 = activation, 1 = gradient
  bool is_send;
  int m, vs;      // the micro-batch and virtual stage whose tensor moves (sender's or receiver's)
};
struct Action {
  char kind;           // 'F', 'B' or 'C' (communicate)
  std::vector<Op> ops; // for 'C'
};

class Recording : public detail::ScheduleDriver {
 public:
  explicit Recording(const ScheduleConfig& c) : c_(c) {}
  std::vector<Action> actions;
  void forward(MbChunk) override { actions.push_back({'F', {}}); }
  void backward(MbChunk) override { actions.push_back({'B', {}}); }
  void communicate(MbChunk sf, MbChunk sb, MbChunk rf, MbChunk rb) override {
    const int P = c_.pp_size, r = c_.pp_rank, S = P * c_.num_chunks;
    const int next = (r + 1) % P, prev = (r + P - 1) % P;
    auto vs = [&](MbChunk x) { return x.c * P + r; };
    std::vector<Op> ops;
    if (sf.some() && vs(sf) != S - 1) ops.push_back({next, 0, true, sf.m, vs(sf)});
    if (sb.some() && vs(sb) != 0) ops.push_back({prev, 1, true, sb.m, vs(sb)});
    if (rf.some() && vs(rf) != 0) ops.push_back({prev, 0, false, rf.m, vs(rf)});
    if (rb.some() && vs(rb) != S - 1) ops.push_back({next, 1, false, rb.m, vs(rb)});
    if (!ops.empty()) actions.push_back({'C', ops});
  }

 private:
  ScheduleConfig c_;
};

// Returns each rank's finish time, or nullopt on deadlock.
std::optional<std::vector<double>> simulate(int P, int M, int v, double tf, double tb) {
  std::vector<std::vector<Action>> acts;
  for (int r = 0; r < P; ++r) {
    ScheduleConfig c{P, r, M, v, false};
    validate_schedule_config(c);
    Recording rec(c);
    if (v > 1) detail::run_interleaved(rec, c); else detail::run_1f1b(rec, c);
    acts.push_back(rec.actions);
  }
  // Stream key (src, dst, tag) -> posted sends / recvs in order: (time, m, vs).
  using Key = std::tuple<int, int, int>;
  struct Posted { double t; int m, vs; };
  std::map<Key, std::vector<Posted>> sends, recvs;
  std::vector<size_t> pc(size_t(P), 0);
  std::vector<double> t(size_t(P), 0.0);
  std::vector<bool> posted(size_t(P), false);
  // Stream positions of each rank's current call's ops.
  std::vector<std::vector<size_t>> my_index(static_cast<size_t>(P));
  size_t done = 0;
  while (done < size_t(P)) {
    bool progressed = false;
    for (int r = 0; r < P; ++r) {
      auto& i = pc[size_t(r)];
      if (i == acts[size_t(r)].size()) continue;
      const Action& a = acts[size_t(r)][i];
      if (a.kind != 'C') {
        t[size_t(r)] += a.kind == 'F' ? tf : tb;
        progressed = true;
        if (++i == acts[size_t(r)].size()) ++done;
        continue;
      }
      if (!posted[size_t(r)]) {  // post every op of the call now
        my_index[size_t(r)].clear();
        for (const Op& op : a.ops) {
          auto& list = op.is_send ? sends[{r, op.peer, op.tag}] : recvs[{op.peer, r, op.tag}];
          my_index[size_t(r)].push_back(list.size());
          list.push_back({t[size_t(r)], op.m, op.vs});
        }
        posted[size_t(r)] = true;
        progressed = true;
      }
      double finish = t[size_t(r)];
      bool ready = true;
      for (size_t k = 0; k < a.ops.size(); ++k) {
        const Op& op = a.ops[k];
        const Key key = op.is_send ? Key{r, op.peer, op.tag} : Key{op.peer, r, op.tag};
        auto& other = op.is_send ? recvs[key] : sends[key];
        const size_t n = my_index[size_t(r)][k];
        if (other.size() <= n) { ready = false; break; }
        const Posted& o = other[n];
        // The message must be the one this side expects: same micro-batch,
        // adjacent virtual stages (activation s -> s+1, gradient s+1 -> s).
        const int send_vs = op.is_send ? op.vs : o.vs, recv_vs = op.is_send ? o.vs : op.vs;
        EXPECT_EQ(o.m, op.m) << "rank " << r << " stream tag " << op.tag;
        EXPECT_EQ(recv_vs, op.tag == 0 ? send_vs + 1 : send_vs - 1) << "rank " << r;
        finish = std::max(finish, o.t);
      }
      if (!ready) continue;
      t[size_t(r)] = finish;
      posted[size_t(r)] = false;
      progressed = true;
      if (++i == acts[size_t(r)].size()) ++done;
    }
    if (!progressed) return std::nullopt;
  }
  for (auto& [key, list] : sends) EXPECT_EQ(list.size(), recvs[key].size()) << "unmatched sends";
  return t;
}

}  // namespace

TEST(PipelineSimulation, NoDeadlockMessagesMatchAndBubbleIsTheory) {
  for (int P : {2, 3, 4, 8})
    for (int v : {1, 2, 3, 4})
      for (int M : {P, 2 * P, 3 * P, 8 * P}) {
        SCOPED_TRACE(testing::Message() << "P=" << P << " v=" << v << " m=" << M);
        const double tf = 1.0 / v, tb = 2.0 / v;  // per chunk: a stage's layers split v ways
        auto t = simulate(P, M, v, tf, tb);
        ASSERT_TRUE(t.has_value()) << "deadlock";
        const double compute = M * v * (tf + tb);
        double makespan = 0;
        for (double x : *t) makespan = std::max(makespan, x);
        EXPECT_DOUBLE_EQ((*t)[0], makespan);  // pp rank 0 finishes last
        const double bubble = (makespan - compute) / compute;
        EXPECT_NEAR(bubble, theoretical_bubble_fraction({P, 0, M, v, false}), 1e-9);
      }
}

TEST(PipelineSimulation, OneF1BFewerMicrobatchesThanStages) {
  for (int P : {3, 4, 8})
    for (int M = 1; M < P; ++M) {
      auto t = simulate(P, M, 1, 1.0, 2.0);
      ASSERT_TRUE(t.has_value()) << "deadlock P=" << P << " m=" << M;
    }
}
