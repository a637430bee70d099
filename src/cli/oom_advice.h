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
#include "train/train_args.h"

namespace tripod::cli {

struct JobShape {
  int rank = 0, world_size = 1, local_world_size = 1;
  int tp_rank = 0, pp_rank = 0, dp_rank = 0;
};

// The full message: the allocation, the rank, then up to three layouts that
// fit (best first, with their flags) or, when none does, the smallest one
// and how much memory it needs, plus the `tripod plan` command to see more.
std::string oom_advice(const OutOfMemoryError& e, const train::TrainArgs& a, const JobShape& job);

// Before a run: the plan's predicted peak per GPU for the layout these flags
// ask for on `world_size` GPUs (`local_world_size` per node) of
// `capacity_bytes` each. Fits: pass with the breakdown; does not fit (or the
// layout breaks a rule): fail with the layouts predicted to fit, as the OOM
// advice lists them.
struct MemoryFit {
  bool fits = false;
  double predicted_bytes = 0;  // plan's total per GPU (CUDA context included on GPUs)
  std::string finding, fix;
};
MemoryFit memory_fit_check(const train::TrainArgs& a, int world_size, int local_world_size, double capacity_bytes);

}  // namespace tripod::cli
