// Start-up check that every rank was started with the flags that must agree.
//
// NOTE [Args agreement]
// Ranks launched by hand (or by a launcher given per-node scripts) can get
// different flags. With a different --num-attention-heads the ranks train a
// different model each, with a different --hidden-size the first collective
// fails with a size mismatch deep in the communicator, with a different --lr
// the replicas drift apart silently. So right after the world is formed every
// rank publishes its values of the flags that must agree (agreed_args())
// through the rendezvous store, each rank compares itself with rank 0, rank 0
// collects the verdicts and publishes the first difference, and every rank
// stops with that same message:
//   rank 1 has --num-attention-heads 8, rank 0 has 4
// O(world) store traffic: rank 0 reads one verdict per rank, the others one
// list. Per-rank paths of outputs (--metrics-file, --tensorboard-dir) and the
// tokenizer's file paths (node-local copies) are left out on purpose; the
// tokenizer is compared by type and vocabulary size. --save and --load are
// left out too (one shared folder seen under different mount points).
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "comm/store.h"
#include "train/train_args.h"

namespace tripod::train {

using FlagValues = std::vector<std::pair<std::string, std::string>>;  // (flag, value) in a fixed order

// The flags that must be equal on every rank (the rows of train/flag_table.h
// marked must-agree), with their values after TrainArgs::finalize().
FlagValues agreed_args(const TrainArgs& a);

// "" when `mine` equals `rank0`, else the first difference:
// "rank R has --flag X, rank 0 has Y".
std::string first_difference(const FlagValues& mine, int my_rank, const FlagValues& rank0);

// Collective over the world (every rank calls it once, right after the
// rendezvous). Throws tripod::Error on every rank when any rank differs.
void check_args_agree(comm::Store& store, int rank, int world_size, const TrainArgs& args,
                      std::chrono::milliseconds timeout);

}  // namespace tripod::train
