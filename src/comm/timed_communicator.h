// TimedCommunicator: a decorator over any Communicator that adds the host
// wall time spent inside each call and inside each Work::wait() to a
// CommTimer, for the per-iteration time split (train/metrics.h). Several
// communicators may share one timer (e.g. tp and the embedding group).
//
// What it measures: the time the calling thread is blocked in the
// communicator. On Gloo (host tensors) that is the exposed communication
// time. On NCCL the host returns from a collective at once and wait()
// polls until the op is done, so a wait also absorbs device work queued
// before the op: the figure is host time, approximate on GPU. It adds no
// device synchronisation. is_completed() polls are not counted (cheap).
//
// Not thread-safe: the training thread makes every call (as today).
//
// Relates to: comm/communicator.h (the interface decorated),
// parallel/groups.h (time_communication installs it on tp / dp / embd).
//
// Usage:
//   auto timer = std::make_shared<comm::CommTimer>();
//   pg.tp = comm::timed(pg.tp, timer);
//   ... pg.tp->all_reduce(t)->wait(); ...
//   double s = timer->seconds();   // cumulative; take differences per iteration
#pragma once

#include <cstdint>
#include <memory>

#include "comm/communicator.h"

namespace tripod::comm {

class CommTimer {
 public:
  void add(double seconds) {
    seconds_ += seconds;
    ++calls_;
  }
  double seconds() const { return seconds_; }  // cumulative since construction
  int64_t calls() const { return calls_; }     // timed calls + waits

 private:
  double seconds_ = 0;
  int64_t calls_ = 0;
};

// Wraps inner; a null inner gives null. Rank, size, name and errors are
// the inner communicator's.
std::shared_ptr<Communicator> timed(std::shared_ptr<Communicator> inner, std::shared_ptr<CommTimer> timer);

}  // namespace tripod::comm
