// Implementation of comm/timed_communicator.h.
#include "comm/timed_communicator.h"

#include <chrono>
#include <utility>

namespace tripod::comm {
namespace {

using Clock = std::chrono::steady_clock;

// Adds the scope's wall time to the timer, also when the call throws.
class Scope {
 public:
  explicit Scope(CommTimer& t) : timer_(t), start_(Clock::now()) {}
  ~Scope() { timer_.add(std::chrono::duration<double>(Clock::now() - start_).count()); }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  CommTimer& timer_;
  Clock::time_point start_;
};

class TimedWork final : public Work {
 public:
  TimedWork(std::shared_ptr<Work> inner, std::shared_ptr<CommTimer> timer)
      : inner_(std::move(inner)), timer_(std::move(timer)) {}
  void wait() override {
    Scope s(*timer_);
    inner_->wait();
  }
  bool is_completed() override { return inner_->is_completed(); }

 private:
  std::shared_ptr<Work> inner_;
  std::shared_ptr<CommTimer> timer_;
};

class TimedCommunicator final : public Communicator {
 public:
  TimedCommunicator(std::shared_ptr<Communicator> inner, std::shared_ptr<CommTimer> timer)
      : inner_(std::move(inner)), timer_(std::move(timer)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }

  std::shared_ptr<Work> all_reduce(Tensor& t, const AllReduceOptions& o) override {
    return wrap([&] { return inner_->all_reduce(t, o); });
  }
  std::shared_ptr<Work> all_gather(Tensor& out, const Tensor& in, const AllGatherOptions& o) override {
    return wrap([&] { return inner_->all_gather(out, in, o); });
  }
  std::shared_ptr<Work> reduce_scatter(Tensor& out, const Tensor& in, const ReduceScatterOptions& o) override {
    return wrap([&] { return inner_->reduce_scatter(out, in, o); });
  }
  std::shared_ptr<Work> broadcast(Tensor& t, const BroadcastOptions& o) override {
    return wrap([&] { return inner_->broadcast(t, o); });
  }
  std::shared_ptr<Work> send(const Tensor& t, int dst, const SendOptions& o) override {
    return wrap([&] { return inner_->send(t, dst, o); });
  }
  std::shared_ptr<Work> recv(Tensor& t, int src, const RecvOptions& o) override {
    return wrap([&] { return inner_->recv(t, src, o); });
  }
  std::shared_ptr<Work> all_to_all_v(Tensor& out, const Tensor& in, const std::vector<int64_t>& send_counts,
                                     const std::vector<int64_t>& recv_counts, const AllToAllOptions& o) override {
    return wrap([&] { return inner_->all_to_all_v(out, in, send_counts, recv_counts, o); });
  }
  void barrier(const BarrierOptions& o) override {
    Scope s(*timer_);
    inner_->barrier(o);
  }
  void abort() noexcept override { inner_->abort(); }

 private:
  template <typename F>
  std::shared_ptr<Work> wrap(F&& call) {
    std::shared_ptr<Work> w;
    {
      Scope s(*timer_);
      w = call();
    }
    return w ? std::make_shared<TimedWork>(std::move(w), timer_) : w;
  }

  std::shared_ptr<Communicator> inner_;
  std::shared_ptr<CommTimer> timer_;
};

}  // namespace

std::shared_ptr<Communicator> timed(std::shared_ptr<Communicator> inner, std::shared_ptr<CommTimer> timer) {
  if (!inner) return inner;
  return std::make_shared<TimedCommunicator>(std::move(inner), std::move(timer));
}

}  // namespace tripod::comm
