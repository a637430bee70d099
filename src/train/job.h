// One training job, assembled (Megatron's pretrain(): initialize, build, train):
// the device, the --load fresh-start check, the rendezvous, the check that
// every rank got the same flags, the layout and process groups, the Trainer,
// and what an out-of-memory error says. cli/train.cpp parses the flags and
// calls run_training_job; what lives above train/ (the backend factory with
// its optional CUDA module, the device probe, the OOM advice of plan/) comes
// in as hooks.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "backend/ops.h"
#include "base/error.h"
#include "comm/context.h"
#include "comm/rendezvous.h"
#include "data/tokenizer.h"
#include "parallel/layout.h"
#include "train/train_args.h"

namespace tripod::train {

struct BuiltBackend {
  std::unique_ptr<backend::Backend> backend;
  comm::CommBackend comm = comm::CommBackend::Default;  // the collectives' transport
};

struct JobHooks {
  // The device when --device is not given ("cuda" or "cpu"); logs why on rank 0.
  std::function<std::string(const comm::RankInfo&)> default_device;
  // This rank's backend for --device and --distributed-backend.
  std::function<BuiltBackend(const TrainArgs&, const comm::RankInfo&)> make_backend;
  // The message of an out-of-memory error: the rank, the layout and the
  // layouts predicted to fit.
  std::function<std::string(const OutOfMemoryError&, const TrainArgs&, const parallel::Layout&, int global_rank,
                            int local_world_size)>
      oom_advice;
};

// Runs the job this rank is part of (rank and world from torchrun / Slurm /
// Open MPI / tripod launch). `args` as parsed and finalized. Returns 0.
int run_training_job(TrainArgs args, const JobHooks& hooks);

// The vocabulary size from the tokenizer flags (Megatron builds the
// tokenizer to learn it): loading the tokenizer also validates the files, so
// a wrong vocab or merges file fails here, before any compute. 0 without one.
int64_t vocab_size_from_tokenizer(const data::TokenizerConfig& tc);
// The model's vocabulary: --vocab-size when given (0: not given), else the
// tokenizer's. A --vocab-size below the tokenizer's vocabulary is refused.
int64_t resolve_vocab_size(int64_t vocab_size, const data::TokenizerConfig& tc);

}  // namespace tripod::train
