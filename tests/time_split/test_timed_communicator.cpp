// comm::timed / parallel::time_communication against a communicator whose
// calls and waits take known times (sleeps): the timer adds exactly the
// blocked time, passes results, identity and errors through, and
// single-rank groups are left undecorated (so they read exactly 0).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "base/error.h"
#include "comm/local_communicator.h"
#include "comm/timed_communicator.h"
#include "parallel/groups.h"

namespace tripod {
namespace {

using namespace std::chrono_literals;

class SleepWork final : public comm::Work {
 public:
  SleepWork(std::chrono::milliseconds d, bool fail) : d_(d), fail_(fail) {}
  void wait() override {
    std::this_thread::sleep_for(d_);
    if (fail_) TRIPOD_FAIL("peer failed");
  }
  bool is_completed() override {
    std::this_thread::sleep_for(d_);  // would be counted if polls were timed
    return true;
  }

 private:
  std::chrono::milliseconds d_;
  bool fail_;
};

// all_reduce: 10 ms in the call, 20 ms in wait(); recv: a wait that throws.
class SleepComm final : public comm::Communicator {
 public:
  int rank() const override { return 1; }
  int size() const override { return 2; }
  const std::string& name() const override { return name_; }
  std::shared_ptr<comm::Work> all_reduce(Tensor& t, const comm::AllReduceOptions&) override {
    std::this_thread::sleep_for(10ms);
    t.data<float>()[0] *= 2;
    return std::make_shared<SleepWork>(20ms, false);
  }
  std::shared_ptr<comm::Work> all_gather(Tensor&, const Tensor&, const comm::AllGatherOptions&) override {
    return nullptr;
  }
  std::shared_ptr<comm::Work> reduce_scatter(Tensor&, const Tensor&, const comm::ReduceScatterOptions&) override {
    return nullptr;
  }
  std::shared_ptr<comm::Work> broadcast(Tensor&, const comm::BroadcastOptions&) override { return nullptr; }
  std::shared_ptr<comm::Work> send(const Tensor&, int, const comm::SendOptions&) override { return nullptr; }
  std::shared_ptr<comm::Work> recv(Tensor&, int, const comm::RecvOptions&) override {
    return std::make_shared<SleepWork>(5ms, true);
  }
  void barrier(const comm::BarrierOptions&) override { std::this_thread::sleep_for(7ms); }
  void abort() noexcept override {}

 private:
  std::string name_ = "dp";
};

TEST(TimedCommunicator, AddsCallAndWaitTime) {
  auto timer = std::make_shared<comm::CommTimer>();
  auto inner = std::make_shared<SleepComm>();
  auto c = comm::timed(inner, timer);
  EXPECT_EQ(c->rank(), 1);
  EXPECT_EQ(c->size(), 2);
  EXPECT_EQ(c->name(), "dp");
  Tensor t = Tensor::zeros({1}, DType::F32);
  t.data<float>()[0] = 3;
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto w = c->all_reduce(t);
  const double call_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double after_call = timer->seconds();
  EXPECT_GE(after_call, 0.010);
  EXPECT_TRUE(w->is_completed());  // a 20 ms poll, not counted
  EXPECT_EQ(timer->seconds(), after_call);
  const auto t1 = Clock::now();
  w->wait();
  const double wait_s = std::chrono::duration<double>(Clock::now() - t1).count();
  EXPECT_EQ(t.data<float>()[0], 6.f);
  EXPECT_GE(timer->seconds() - after_call, 0.020);
  // No more than the call and the wait took by the test's own clock (so
  // the poll between them is not in it), however late a loaded box wakes
  // the sleepers.
  EXPECT_LE(timer->seconds(), call_s + wait_s + 1e-3);
  EXPECT_EQ(timer->calls(), 2);
  c->barrier();
  EXPECT_GE(timer->seconds(), 0.037);
  // A failing wait still counts and still throws.
  auto r = c->recv(t, 0);
  EXPECT_THROW(r->wait(), Error);
  EXPECT_GE(timer->seconds(), 0.042);
  EXPECT_EQ(timer->calls(), 5);
  // Null works stay null.
  EXPECT_EQ(c->send(t, 0), nullptr);
  EXPECT_EQ(comm::timed(nullptr, timer), nullptr);
}

TEST(TimedCommunicator, OnlyMultiRankGroupsAreTimed) {
  parallel::ProcessGroups pg;
  auto tp = std::make_shared<comm::LocalCommunicator>("tp");
  auto dp = std::make_shared<SleepComm>();
  pg.tp = tp;
  pg.dp = dp;
  auto timers = parallel::time_communication(pg);
  EXPECT_EQ(pg.tp, tp);          // size 1: untouched
  EXPECT_EQ(pg.embd, nullptr);   // absent stays absent
  EXPECT_NE(pg.dp, dp);          // decorated
  Tensor t = Tensor::zeros({1}, DType::F32);
  pg.dp->all_reduce(t)->wait();
  pg.tp->all_reduce(t)->wait();
  EXPECT_GE(timers.dp->seconds(), 0.030);
  EXPECT_EQ(timers.tp->seconds(), 0.0);
  EXPECT_EQ(timers.tp->calls(), 0);
}

}  // namespace
}  // namespace tripod
