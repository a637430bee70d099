// Where the host wall time of the training iterations goes (the time split
// of train/metrics.h: data, tp comm, pp wait, dp comm, optimizer, and
// compute as the rest) and the interval's wall clock, accumulated over a log
// interval beside the loop, so that Trainer::run and train_step read as the
// algorithm.
//
// Per iteration, train_step marks its phases in order:
//   begin_iteration()   zero grads, the pipeline schedule
//   schedule_done()     reduce_grads (finalize_model_grads), the loss read
//   optimizer_begin()   grad norm, lr, the fp16 scaler
//   grad_norm_done()    clip + AdamW + compute-copy cast
//   optimizer_end(...)  adds this iteration to the interval
// The communicators' own timers (parallel::CommTimers) give tp and dp comm;
// the schedule's stats give pp wait; the pipeline stage gives data; the
// optimizer part is its host time less the communication inside it.
// TRIPOD_STEP_TIMING=1 also synchronises at each mark and logs the three
// phases (costs the overlap it measures).
//
// Relates to: train/metrics.h (IterationMetrics::TimeSplit), train/trainer.h,
// docs/monitoring.md.
#pragma once

#include <cstdint>
#include <optional>

#include "backend/ops.h"
#include "base/timer.h"
#include "parallel/groups.h"
#include "parallel/pp_schedule.h"
#include "train/metrics.h"

namespace tripod::train {

class TimeSplitAccumulator {
 public:
  TimeSplitAccumulator() = default;
  TimeSplitAccumulator(parallel::CommTimers timers, backend::Backend* be, bool step_timing);

  void begin_iteration();
  void schedule_done();
  void optimizer_begin();
  void grad_norm_done();
  // `iteration`, `num_microbatches`: for the TRIPOD_STEP_TIMING line.
  void optimizer_end(const parallel::ScheduleStats& schedule, double data_seconds, int64_t iteration,
                     int64_t num_microbatches);

  // The interval (since reset()): its iterations, their mean wall time
  // (the clock runs from reset() or restart_clock(), so evaluation and
  // saving stay out), the split of a mean iteration of elapsed_ms, and the
  // measured pipeline bubble (p2p wait / compute).
  int64_t iterations() const { return iterations_; }
  double seconds_per_iteration() const { return wall_.seconds() / static_cast<double>(iterations_); }
  IterationMetrics::TimeSplit split(double elapsed_ms) const;
  double pp_bubble() const { return compute_s_ > 0 ? wait_s_ / compute_s_ : 0.0; }
  void reset();          // a new interval; the clock starts now
  void restart_clock();  // time until now is not iteration time

 private:
  double tp_seconds() const { return timers_.tp->seconds(); }
  double dp_seconds() const { return timers_.dp->seconds(); }

  parallel::CommTimers timers_;
  backend::Backend* be_ = nullptr;
  bool step_timing_ = false;
  // This iteration: the communicators' cumulative times at its start and
  // at the optimizer's start, the optimizer's timer, the debug phases.
  double tp0_ = 0, dp0_ = 0, tp_opt0_ = 0, dp_opt0_ = 0;
  Timer optimizer_, phase_;
  double t_sched_ms_ = 0, t_norm_ms_ = 0;
  // The interval: its clock, iterations, and seconds summed over them.
  Timer wall_;
  int64_t iterations_ = 0;
  double compute_s_ = 0, wait_s_ = 0, data_s_ = 0, tp_s_ = 0, dp_s_ = 0, opt_s_ = 0;
};

// The split of one iteration of iteration_ms from the measured parts (all
// ms); compute is the remainder, never negative. Host wall time: exact on
// CPU, approximate on GPU where kernels run asynchronously (docs/parallelism.md).
IterationMetrics::TimeSplit make_time_split(double iteration_ms, double tp_comm_ms, double pp_wait_ms,
                                            double dp_comm_ms, double optimizer_ms, double data_ms);

}  // namespace tripod::train
