// What `tripod train` says when a rank runs out of memory: which rank and
// layout, how much was asked for, and the layouts `tripod plan` predicts to
// fit this model on this job's GPUs (mission step 11: "CUDA OOM says which
// rank, how much was needed, and what layout tripod plan suggests instead").
// `tripod doctor -- TRAIN FLAGS` checks the same prediction before a run
// (memory_fit_check): one memory model for plan, doctor and the OOM advice.
#pragma once

#include <string>

#include "base/error.h"
#include "plan/search.h"

namespace tripod::plan {

// A training job as the plan sees it.
struct Job {
  GptConfig model;           // finalized
  // The run's layout and precision on the job's GPUs (layout.world_size).
  // dp 0: the GPUs are not a multiple of TP x PP (memory_fit_check says so).
  Layout layout;
  int local_world_size = 1;  // GPUs per node
  bool cpu_device = false;   // --device cpu: no CUDA context or library workspaces (TRIPOD_CPU_MEMORY_LIMIT_MB)
  // The model as `tripod plan` flags (every model flag given; from the flag
  // table); empty: the shape fields of `model` only.
  std::string model_flags;
};

// Where the allocation failed.
struct JobShape {
  int rank = 0;
  int tp_rank = 0, pp_rank = 0, dp_rank = 0;
};

// The full message: the allocation, the rank, the weakest stronger
// --data-parallel-sharding-strategy with which the run's own layout is
// predicted to fit (when one does), then up to three layouts that
// fit (best first, with their flags) or, when none does, the smallest one
// and how much memory it needs, plus the `tripod plan` command to see more.
std::string oom_advice(const OutOfMemoryError& e, const Job& job, const JobShape& where);

// Before a run: the plan's predicted peak per GPU for the job's layout on
// GPUs of `capacity_bytes` each. Fits: pass with the breakdown; does not fit
// (or the layout breaks a rule): fail with the layouts predicted to fit, as
// the OOM advice lists them (the sharding strategy that fits first).
struct MemoryFit {
  bool fits = false;
  double predicted_bytes = 0;  // plan's total per GPU (CUDA context included on GPUs)
  std::string finding, fix;
};
MemoryFit memory_fit_check(const Job& job, double capacity_bytes);

}  // namespace tripod::plan
