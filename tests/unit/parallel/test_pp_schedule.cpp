// Pipeline schedules with real communication: threads as ranks over one
// HashStore and the Gloo communicator (c10d's pattern). A toy model of
// S = P*v virtual stages, y_s = a_s * x_s + b_s on a small f64 vector, loss
// sum over micro-batches of 0.5*|y_{S-1}|^2, is split across the pp ranks;
// every gradient da_s, db_s (and every forward output in evaluation) must
// equal the single-process analytic value. The stage poisons its buffers
// with NaN once they may be freed, so a tensor sent too late or never
// received shows up in the numbers. Also: the 1F1B memory bound counted by
// the stage itself, a TP2 x PP2 layout (pp groups that are not the world),
// a p2p timeout, and (label slow) the measured bubble against theory.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "base/error.h"
#include "comm/context.h"
#include "parallel/groups.h"
#include "parallel/pp_schedule.h"
#include "testing/threads_as_ranks.h"

using namespace tripod;
using namespace tripod::parallel;
using namespace std::chrono_literals;

namespace {

constexpr int kN = 5;  // elements per micro-batch activation: (kN,)
const double kNaN = std::numeric_limits<double>::quiet_NaN();

using tripod::testing::run_ranks;

// The toy model's parameters and inputs; `seed` varies them (one per tp rank).
struct Toy {
  int S, M, seed = 0;
  double a(int s) const { return 0.9 + 0.05 * s - 0.01 * seed; }
  double b(int s) const { return 0.1 * ((s * 7 + seed) % 5) - 0.2; }
  double x0(int m, int i) const { return std::sin(1.0 + m + 0.3 * i + seed); }
};

// Single-process analytic reference: da, db per virtual stage, final outputs.
struct Reference {
  std::vector<double> da, db;
  std::vector<std::vector<double>> y;  // [m] -> (kN,)
};

Reference reference(const Toy& toy) {
  Reference ref{std::vector<double>(size_t(toy.S)), std::vector<double>(size_t(toy.S)), {}};
  for (int m = 0; m < toy.M; ++m) {
    std::vector<std::vector<double>> xs(size_t(toy.S) + 1, std::vector<double>(kN));
    for (int i = 0; i < kN; ++i) xs[0][size_t(i)] = toy.x0(m, i);
    for (int s = 0; s < toy.S; ++s)
      for (int i = 0; i < kN; ++i)
        xs[size_t(s) + 1][size_t(i)] = toy.a(s) * xs[size_t(s)][size_t(i)] + toy.b(s);
    ref.y.push_back(xs[size_t(toy.S)]);
    std::vector<double> g = xs[size_t(toy.S)];  // d(0.5 |y|^2)/dy = y
    for (int s = toy.S - 1; s >= 0; --s) {
      double ga = 0, gb = 0;
      for (int i = 0; i < kN; ++i) ga += g[size_t(i)] * xs[size_t(s)][size_t(i)], gb += g[size_t(i)];
      ref.da[size_t(s)] += ga;
      ref.db[size_t(s)] += gb;
      for (auto& gi : g) gi *= toy.a(s);
    }
  }
  return ref;
}

// This pp rank's chunks of the toy model.
class ToyStage : public PipelineStage {
 public:
  ToyStage(const Toy& toy, int pp_size, int pp_rank, int chunks, int sleep_fwd_us = 0,
           bool forward_only = false)
      : da(size_t(chunks)), db(size_t(chunks)), toy_(toy), P_(pp_size), r_(pp_rank), v_(chunks),
        sleep_us_(sleep_fwd_us), forward_only_(forward_only) {}

  int num_chunks() const override { return v_; }
  Tensor& input_tensor(int m, int c) override {
    asked_[{m, c, 'F'}] = steps_;
    return buf(m, c).input;
  }
  const Tensor& output_tensor(int m, int c) override { return buf(m, c).output; }
  Tensor& output_grad(int m, int c) override {
    asked_[{m, c, 'B'}] = steps_;
    return buf(m, c).output_grad;
  }
  const Tensor& input_grad(int m, int c) override { return buf(m, c).input_grad; }

  void forward(int m, int c) override {
    check_asked(m, c, 'F');
    // Evaluation: the previous forward's output has been sent by now.
    if (forward_only_ && last_fwd_.first >= 0) fill(buf(last_fwd_.first, last_fwd_.second).output, kNaN);
    last_fwd_ = {m, c};
    Buffers& b = buf(m, c);
    const int s = c * P_ + r_;
    double* x = b.input.data<double>();
    if (s == 0)
      for (int i = 0; i < kN; ++i) x[i] = toy_.x0(m, i);
    double* y = b.output.data<double>();
    for (int i = 0; i < kN; ++i) y[i] = toy_.a(s) * x[i] + toy_.b(s);
    if (s == toy_.S - 1) outputs[m] = std::vector<double>(y, y + kN);
    live = live + 1;
    max_live = std::max(max_live, live);
    sleep(1);
  }

  void backward(int m, int c) override {
    check_asked(m, c, 'B');
    // The previous backward's input grad has been sent by now.
    if (last_bwd_.first >= 0) fill(buf(last_bwd_.first, last_bwd_.second).input_grad, kNaN);
    last_bwd_ = {m, c};
    Buffers& b = buf(m, c);
    const int s = c * P_ + r_;
    const double* x = b.input.data<double>();
    double* g = b.output_grad.data<double>();
    if (s == toy_.S - 1)
      for (int i = 0; i < kN; ++i) g[i] = b.output.data<double>()[i];
    double ga = 0, gb = 0;
    for (int i = 0; i < kN; ++i) ga += g[i] * x[i], gb += g[i];
    da[size_t(c)] += ga;
    db[size_t(c)] += gb;
    for (int i = 0; i < kN; ++i) b.input_grad.data<double>()[i] = toy_.a(s) * g[i];
    // (m, c)'s activations are dead now: poison them (a late send would carry NaN).
    fill(b.input, kNaN), fill(b.output, kNaN), fill(b.output_grad, kNaN);
    --live;
    sleep(2);
  }

  std::vector<double> da, db;            // per chunk, accumulated over micro-batches
  std::map<int, std::vector<double>> outputs;  // last virtual stage: y per micro-batch
  int live = 0, max_live = 0;            // activation sets held, counted here

 private:
  struct Buffers {
    Tensor input, output, output_grad, input_grad;  // each (kN,) f64
  };
  static void fill(Tensor& t, double v) {
    for (int i = 0; i < kN; ++i) t.data<double>()[i] = v;
  }
  Buffers& buf(int m, int c) {
    auto [it, fresh] = bufs_.try_emplace({m, c});
    if (fresh)
      for (Tensor* t : {&it->second.input, &it->second.output, &it->second.output_grad,
                        &it->second.input_grad}) {
        *t = Tensor::empty({kN}, DType::F64);
        fill(*t, kNaN);
      }
    return it->second;
  }
  // A receive buffer is asked for at most two compute steps before its use.
  void check_asked(int m, int c, char kind) {
    ++steps_;
    auto it = asked_.find({m, c, kind});
    if (it != asked_.end()) EXPECT_LE(steps_ - it->second, 2) << kind << m << "." << c;
  }
  void sleep(int units) const {
    if (sleep_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(units * sleep_us_));
  }
  Toy toy_;
  int P_, r_, v_;
  int sleep_us_;
  bool forward_only_;
  std::map<std::pair<int, int>, Buffers> bufs_;
  std::map<std::tuple<int, int, char>, int> asked_;  // (m, c, F/B) -> steps_ when asked
  int steps_ = 0;
  std::pair<int, int> last_fwd_{-1, 0}, last_bwd_{-1, 0};
};

void expect_close(double got, double want, const std::string& what) {
  EXPECT_NEAR(got, want, 1e-12 * std::max(1.0, std::abs(want))) << what;
}

// Runs the toy pipeline on P ranks (pp group = world) and checks every gradient.
void check_pipeline(int P, int M, int v, bool forward_only) {
  const Toy toy{P * v, M};
  const Reference ref = reference(toy);
  std::vector<ScheduleStats> stats(static_cast<size_t>(P));
  run_ranks(P, 20s, [&](int rank, comm::DistContext& ctx) {
    ToyStage stage(toy, P, rank, v, 0, forward_only);
    const ScheduleConfig sc{P, rank, M, v, forward_only};
    stats[size_t(rank)] = run_pipeline_schedule(stage, *ctx.world(), sc);
    EXPECT_EQ(stats[size_t(rank)].steps, schedule_order(sc));
    EXPECT_EQ(stage.live, forward_only ? M * v : 0);
    if (!forward_only) EXPECT_EQ(stage.max_live, stats[size_t(rank)].max_live_microbatches);
    for (int c = 0; c < v && !forward_only; ++c) {
      const int s = c * P + rank;
      expect_close(stage.da[size_t(c)], ref.da[size_t(s)], fmt::format("da of virtual stage {}", s));
      expect_close(stage.db[size_t(c)], ref.db[size_t(s)], fmt::format("db of virtual stage {}", s));
    }
    if (rank == P - 1) {
      ASSERT_EQ(int(stage.outputs.size()), M);
      for (int m = 0; m < M; ++m)
        for (int i = 0; i < kN; ++i)
          expect_close(stage.outputs[m][size_t(i)], ref.y[size_t(m)][size_t(i)],
                       fmt::format("y of micro-batch {} [{}]", m, i));
    }
  });
  // The 1F1B memory property: stage 0 never holds more than P micro-batches.
  if (!forward_only && v == 1) EXPECT_LE(stats[0].max_live_microbatches, P);
  if (!forward_only && v == 1) EXPECT_EQ(stats[0].max_live_microbatches, std::min(P, M));
}

}  // namespace

TEST(PipelineSchedule, OneF1BP2) { check_pipeline(2, 4, 1, false); }
TEST(PipelineSchedule, OneF1BP4) { check_pipeline(4, 8, 1, false); }
TEST(PipelineSchedule, OneF1BP4FewMicrobatches) { check_pipeline(4, 3, 1, false); }
TEST(PipelineSchedule, InterleavedP2V2) { check_pipeline(2, 4, 2, false); }
TEST(PipelineSchedule, InterleavedP4V2) { check_pipeline(4, 8, 2, false); }
TEST(PipelineSchedule, InterleavedP4V3MEqualsP) { check_pipeline(4, 4, 3, false); }
TEST(PipelineSchedule, ForwardOnly1F1B) { check_pipeline(4, 5, 1, true); }
TEST(PipelineSchedule, ForwardOnlyInterleaved) { check_pipeline(2, 4, 2, true); }

TEST(PipelineSchedule, SingleStageNeedsNoPeers) {
  const Toy toy{1, 3};
  const Reference ref = reference(toy);
  ToyStage stage(toy, 1, 0, 1);
  comm::LocalCommunicator pp("pp");
  auto st = run_pipeline_schedule(stage, pp, {1, 0, 3, 1, false});
  EXPECT_EQ(format_schedule(st.steps, false), "F0 B0 F1 B1 F2 B2");
  EXPECT_EQ(st.max_live_microbatches, 1);
  EXPECT_EQ(st.wait_seconds, 0.0);
  expect_close(stage.da[0], ref.da[0], "da");
  expect_close(stage.db[0], ref.db[0], "db");
}

TEST(PipelineSchedule, Tp2Pp2LayoutUsesThePpGroup) {
  // Global ranks 0..3, tp fastest: pp groups [0,2] and [1,3]. Each tp rank
  // runs its own pipeline on different data at the same time.
  run_ranks(4, 20s, [&](int rank, comm::DistContext& ctx) {
    auto pg = make_process_groups(ctx, Layout::make(4, 2, 2, 2));
    const int tp_rank = pg.layout.tp_rank(rank), pp_rank = pg.layout.pp_rank(rank);
    ASSERT_EQ(pg.pp->rank(), pp_rank);
    const Toy toy{4, 4, tp_rank};
    const Reference ref = reference(toy);
    ToyStage stage(toy, 2, pp_rank, 2);
    run_pipeline_schedule(stage, *pg.pp, {2, pp_rank, 4, 2, false});
    for (int c = 0; c < 2; ++c) {
      expect_close(stage.da[size_t(c)], ref.da[size_t(c * 2 + pp_rank)], "da");
      expect_close(stage.db[size_t(c)], ref.db[size_t(c * 2 + pp_rank)], "db");
    }
  });
}

TEST(PipelineSchedule, MismatchedStageIsAClearError) {
  ToyStage stage(Toy{2, 2}, 1, 0, 2);
  comm::LocalCommunicator pp("pp");
  try {
    run_pipeline_schedule(stage, pp, {1, 0, 2, 1, false});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2 model chunks"), std::string::npos) << e.what();
  }
}

TEST(PipelineSchedule, MissingPeerTimesOut) {
  std::atomic<bool> done{false};
  std::string message;
  run_ranks(2, 1500ms, [&](int rank, comm::DistContext& ctx) {
    if (rank == 1) {  // alive, but never runs its half of the pipeline
      while (!done) std::this_thread::sleep_for(10ms);
      return;
    }
    ToyStage stage(Toy{2, 2}, 2, 0, 1);
    try {
      run_pipeline_schedule(stage, *ctx.world(), {2, 0, 2, 1, false});
      ADD_FAILURE() << "schedule without its peer completed";
    } catch (const TimeoutError& e) {
      message = e.what();
    }
    done = true;
  });
  EXPECT_NE(message.find("timed out"), std::string::npos) << message;
  EXPECT_NE(message.find("global rank 1"), std::string::npos) << message;
}

// Timing-based, so labelled slow: with forward = 1 unit and backward = 2
// units of sleep (a stage's work split over its v chunks), pp rank 0 (first
// to start, last to finish; later stages finish earlier and would wait in
// the step's next collective instead) idles about (P-1)/m, or (P-1)/(v m),
// of its compute time. p2p latency only adds to that.
TEST(PipelineBubble, MeasuredNearTheory) {
  const int P = 4, M = 8, unit_us = 20000;
  for (int v : {1, 2}) {
    const Toy toy{P * v, M};
    std::vector<double> measured(static_cast<size_t>(P));
    run_ranks(P, 20s, [&](int rank, comm::DistContext& ctx) {
      ToyStage stage(toy, P, rank, v, unit_us / v);
      auto st = run_pipeline_schedule(stage, *ctx.world(), {P, rank, M, v, false});
      measured[size_t(rank)] = measured_bubble_fraction(st);
    });
    const double theory = theoretical_bubble_fraction({P, 0, M, v, false});
    for (int r = 0; r < P; ++r)
      std::printf("P=%d m=%d v=%d pp rank %d: measured bubble %.3f (theory for rank 0: %.3f)\n", P,
                  M, v, r, measured[size_t(r)], theory);
    EXPECT_GT(measured[0], 0.8 * theory);
    // p2p latency and late wake-ups add to the bubble: +0.02 to +0.18 seen
    // on 2 loaded cores (about 30 p2p calls per rank, ~0.1 ms one way idle).
    EXPECT_LT(measured[0], theory + 0.3);
  }
}
