// What a run checks about the paths it will write, before it builds the
// model: every rank that writes checks its own (the --save folder on every
// rank, since every dp-rank-0 rank writes its file there; the metrics file
// and the TensorBoard folder on the rank that logs), rank 0 takes the
// save-folder lock (ckpt/save_lock.h) and refuses a folder that holds
// another run's checkpoints; then every rank learns every rank's result
// through the rendezvous store, so the whole job stops with the same message
// instead of one rank failing and the others timing out.
//
// Relates to: train/job.cpp (the caller), ckpt/save_lock.h, ckpt/atomic_io.h
// (check_writable_dir, fail_path), docs/checkpoints.md.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "ckpt/save_lock.h"
#include "comm/store.h"
#include "train/train_args.h"

namespace tripod::train {

// `args.checkpoint.load` as the job resolved it (empty for a fresh start).
// `store` null for a single process. Returns rank 0's lock on the --save
// folder (null on other ranks and without --save); throws the first
// failure of any rank, naming that rank.
std::unique_ptr<ckpt::SaveDirLock> check_run_outputs(const TrainArgs& args, int rank, int world_size,
                                                     comm::Store* store, std::chrono::milliseconds timeout,
                                                     const std::string& job);

// Rank 0, with --save: refuses a folder that holds committed checkpoints
// this run does not resume from (--load naming the same folder), unless
// --save-into-existing is given. Logs what it allows. `who`: "this run",
// "this import".
void check_save_dir_is_this_runs(const CheckpointArgs& ck, const std::string& who = "this run");

}  // namespace tripod::train
