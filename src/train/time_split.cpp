// Implementation of train/time_split.h.
#include "train/time_split.h"

#include <algorithm>

#include "base/log.h"

namespace tripod::train {

IterationMetrics::TimeSplit make_time_split(double iteration_ms, double tp_comm_ms, double pp_wait_ms,
                                            double dp_comm_ms, double optimizer_ms, double data_ms) {
  IterationMetrics::TimeSplit t;
  t.tp_comm_ms = tp_comm_ms;
  t.pp_wait_ms = pp_wait_ms;
  t.dp_comm_ms = dp_comm_ms;
  t.optimizer_ms = optimizer_ms;
  t.data_ms = data_ms;
  t.compute_ms = std::max(0.0, iteration_ms - (tp_comm_ms + pp_wait_ms + dp_comm_ms + optimizer_ms + data_ms));
  return t;
}

TimeSplitAccumulator::TimeSplitAccumulator(parallel::CommTimers timers, backend::Backend* be, bool step_timing)
    : timers_(std::move(timers)), be_(be), step_timing_(step_timing) {}

void TimeSplitAccumulator::begin_iteration() {
  phase_.reset();
  t_sched_ms_ = t_norm_ms_ = 0;
  tp0_ = tp_seconds();
  dp0_ = dp_seconds();
}

void TimeSplitAccumulator::schedule_done() {
  if (!step_timing_) return;
  be_->synchronize();
  t_sched_ms_ = phase_.millis();
  phase_.reset();
}

void TimeSplitAccumulator::optimizer_begin() {
  optimizer_.reset();
  tp_opt0_ = tp_seconds();
  dp_opt0_ = dp_seconds();
}

void TimeSplitAccumulator::grad_norm_done() {
  if (!step_timing_) return;
  t_norm_ms_ = phase_.millis();  // the norm's host read already synchronised
  phase_.reset();
}

void TimeSplitAccumulator::optimizer_end(const parallel::ScheduleStats& schedule, double data_seconds,
                                         int64_t iteration, int64_t num_microbatches) {
  // The optimizer's own dp all-gather counts as dp comm, not optimizer.
  const double opt = std::max(0.0, optimizer_.seconds() - (dp_seconds() - dp_opt0_) - (tp_seconds() - tp_opt0_));
  if (step_timing_) {
    be_->synchronize();
    log::info("step timing, iteration {}: forward+backward {:.2f} ms ({} micro-batches), loss read + "
              "reductions + grad norm {:.2f} ms, optimizer + weight cast {:.2f} ms", iteration, t_sched_ms_,
              num_microbatches, t_norm_ms_, phase_.millis());
  }
  compute_s_ += schedule.compute_seconds;
  wait_s_ += schedule.wait_seconds;
  data_s_ += data_seconds, tp_s_ += tp_seconds() - tp0_, dp_s_ += dp_seconds() - dp0_, opt_s_ += opt;
  ++iterations_;
}

IterationMetrics::TimeSplit TimeSplitAccumulator::split(double elapsed_ms) const {
  const double per_ms = 1e3 / static_cast<double>(iterations_);
  return make_time_split(elapsed_ms, tp_s_ * per_ms, wait_s_ * per_ms, dp_s_ * per_ms, opt_s_ * per_ms,
                         data_s_ * per_ms);
}

void TimeSplitAccumulator::reset() {
  compute_s_ = wait_s_ = data_s_ = tp_s_ = dp_s_ = opt_s_ = 0;
  iterations_ = 0;
  wall_.reset();
}

void TimeSplitAccumulator::restart_clock() { wall_.reset(); }

}  // namespace tripod::train
