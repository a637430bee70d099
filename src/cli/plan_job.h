// The plan's view of a `tripod train` run (plan/oom_advice.h): its model,
// layout, precision and device as the training flags give them, for the
// advice after an out-of-memory error and `tripod doctor -- TRAIN FLAGS`.
#pragma once

#include "config/layout.h"
#include "plan/oom_advice.h"
#include "train/train_args.h"

namespace tripod::cli {

// `ranks`: the job's rank layout (Layout::make over its world).
plan::Job plan_job(const train::TrainArgs& a, const config::Layout& ranks, int local_world_size);

// Before a launch: the layout these flags ask for on `world_size` GPUs; when
// the GPUs are not a multiple of TP x PP, the sizes as asked with dp 0
// (plan::memory_fit_check names the mismatch).
plan::Job plan_job(const train::TrainArgs& a, int world_size, int local_world_size);

// The model flags of `a` as `tripod plan` takes them: every row of the flag
// table that plan takes, spelled as given when it differs from the default
// (so a new model flag is in the `more: tripod plan ...` command by its row).
std::string plan_model_flags(const train::TrainArgs& a);

}  // namespace tripod::cli
