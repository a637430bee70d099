// What `tripod train` says when a rank runs out of memory: which rank and
// layout, how much was asked for, and the layouts `tripod plan` predicts to
// fit this model on this job's GPUs (mission step 11: "CUDA OOM says which
// rank, how much was needed, and what layout tripod plan suggests instead").
#pragma once

#include <string>

#include "base/error.h"
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

}  // namespace tripod::cli
