// Megatron-LM's checkpoint directories, recognised where a tripod checkpoint
// is expected (--load names one: say what it is and how to convert it), and
// listed for the importer (interop/megatron_import.h).
//
// Legacy layout (megatron/training/checkpointing.py):
//   DIR/latest_checkpointed_iteration.txt        "N" or "release"
//   DIR/iter_000000N/mp_rank_TT/model_optim_rng.pt        PP = 1
//   DIR/iter_000000N/mp_rank_TT_PPP/model_optim_rng.pt    PP > 1
//   DIR/iter_000000N/mp_rank_TT_PPP_EEE/...               expert parallel
// The torch_dist format: iter_N/.metadata and __*_*.distcp files.
//
// Relates to: ckpt/sharded_checkpoint.h (the same marker and iter_N names),
// interop/megatron_import.h, docs/checkpoints.md.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <utility>

namespace tripod::ckpt {

// The iteration directory of DIR: DIR itself when it is iter_N or release,
// else the one DIR/latest_checkpointed_iteration.txt names. Empty if
// neither. `marker` (optional) receives the marker file's text.
std::filesystem::path megatron_iteration_dir(const std::filesystem::path& dir, std::string* marker = nullptr);

// The model-parallel rank files of one iteration directory.
struct MegatronRankDirs {
  int tp = 0, pp = 0;
  bool expert = false;
  std::map<std::pair<int, int>, std::filesystem::path> files;  // (tp, pp) -> model_optim_rng.pt
};
MegatronRankDirs megatron_rank_dirs(const std::filesystem::path& iter);

// Whether an iteration directory holds a torch_dist (distcp) checkpoint.
bool is_megatron_torch_dist(const std::filesystem::path& iter);

// What Megatron checkpoint DIR (a --load directory or one iteration's
// directory) holds, in one sentence; "" when it is not one.
std::string describe_megatron_checkpoint(const std::string& dir);

// The fix to print with describe_megatron_checkpoint()'s sentence.
std::string megatron_checkpoint_hint(const std::string& dir);

}  // namespace tripod::ckpt
