// Sharded checkpoints: Megatron's directory names, one safetensors file per
// model-parallel rank, one metadata.json, and an atomic commit.
//
//   DIR/latest_checkpointed_iteration.txt      "100"
//   DIR/iter_0000100/metadata.json             written last, by rank 0
//   DIR/iter_0000100/model_rank_<tp>_<pp>.safetensors
//       model.<param>, optim.exp_avg.<param>, optim.exp_avg_sq.<param>:
//       this tp rank's shard (f32) of every parameter its pp stage holds.
//   DIR/iter_0000100/model_rank_<tp>_<pp>_ep<e>.safetensors
//       expert parallelism: the MoE experts ep rank e > 0 holds (the same
//       tensor names; each expert is whole in one file). The index in
//       metadata.json points each tensor at its file, so nothing else
//       changes and a checkpoint without experts keeps its bytes.
//
// Save protocol (see NOTE [Atomic commit] in sharded_checkpoint.cpp):
//   rank 0: prepare_save()         -> DIR/iter_0000100.tmp/ (empty)
//   barrier
//   dp rank 0 of each (tp, pp): write_rank_file() (with expert parallelism
//     also the other ep ranks of edp rank 0, their experts)
//   barrier
//   rank 0: commit_save()          -> metadata.json, rename, latest marker, retain
// Load: CheckpointReader assembles any parameter's full tensor from the tp
// slices that exist, so a checkpoint loads at any layout (ckpt/reshard.h).
//
// Relates to: train/checkpointing.cpp (the Trainer's use), docs/checkpoints.md.
// Reference: Megatron-LM megatron/training/checkpointing.py (names only).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/safetensors.h"
#include "config/gpt_config.h"
#include "model/param_table.h"

namespace tripod::ckpt {

constexpr int kFormatVersion = 1;
constexpr const char* kLatestFile = "latest_checkpointed_iteration.txt";
constexpr const char* kMetadataFile = "metadata.json";

std::string iter_dir_name(int64_t iteration);          // "iter_0000100"
// ep_rank > 0: "model_rank_1_0_ep2.safetensors", the experts of ep rank 2
// (expert parallelism; ep rank 0's are in its model_rank_<tp>_<pp> file).
std::string rank_file_name(int tp_rank, int pp_rank, int ep_rank = 0);  // "model_rank_1_0.safetensors"
const char* shard_name(model::ShardDim s);             // "None", "Rows", "Cols", "QkvRows", "GluRows", "QkvGroups"
model::ShardDim shard_from_name(const std::string& s, const std::string& file);

nlohmann::json config_to_json(const config::GptConfig& c);
config::GptConfig config_from_json(const nlohmann::json& j, const std::string& file);

// The iteration in DIR/latest_checkpointed_iteration.txt, or -1 when DIR has
// no checkpoint. A malformed marker is an Error naming it.
int64_t read_latest_iteration(const std::string& dir);

// Whether --load DIR holds a checkpoint to resume from. As Megatron, a
// directory that does not exist yet, or holds no checkpoint (nothing, or only
// an uncommitted iter_*.tmp), is a fresh start: false, and `why` says which.
// A malformed latest marker, or committed iter_* directories without one,
// is a damaged checkpoint: an Error naming it (the run must not silently
// start over).
bool load_dir_has_checkpoint(const std::string& dir, std::string* why = nullptr);

// One tensor a rank writes: its tp shard plus what the metadata needs.
struct ShardTensor {
  std::string name;   // e.g. model.decoder.layers.0.mlp.linear_fc1.weight
  Shape global_shape;
  model::ShardDim shard = model::ShardDim::None;
  Tensor local;       // host f32, this tp rank's shard
};

// Rank 0, before the first barrier: removes what failed or killed saves left
// in `save_dir` (every iter_*.tmp/ directory, marker temporaries of dead
// processes; a log line each) and creates this iteration's temporary
// directory empty. Returns its path.
std::string prepare_save(const std::string& save_dir, int64_t iteration);
// Rank 0, after a save failed on any rank (all ranks are past their writes):
// removes the temporary directory, so that a full disk is not kept full by
// it, and puts back a checkpoint of the same iteration that was moved aside.
// Never throws (logs what it could not remove).
void discard_save(const std::string& save_dir, int64_t iteration);
std::string tmp_dir_for(const std::string& save_dir, int64_t iteration);
// Every dp-rank-0 rank: its shards into tmp_dir/model_rank_<tp>_<pp>.safetensors.
void write_rank_file(const std::string& tmp_dir, int tp_rank, int tp_size, int pp_rank,
                     const std::vector<ShardTensor>& tensors, int ep_rank = 0);
// The same file streamed: the tensors are declared up front (names, shapes
// and this rank's local shape), then each one's host f32 values are passed in the
// declared order, in pieces of any size, so that the writer holds one
// piece at a time instead of every tensor (ckpt/safetensors.h
// SafetensorsWriter). The bytes equal write_rank_file's.
class RankFileWriter {
 public:
  struct Declared {
    std::string name;
    Shape global_shape;
    model::ShardDim shard = model::ShardDim::None;
    Shape local_shape;
  };
  RankFileWriter(const std::string& tmp_dir, int tp_rank, int tp_size, int pp_rank,
                 const std::vector<Declared>& declared, int ep_rank = 0);
  void write(const float* values, int64_t n) { file_.write(values, static_cast<size_t>(n) * sizeof(float)); }
  void finish() { file_.finish(); }

 private:
  SafetensorsWriter file_;
};

// Rank 0, after every rank_file is written: indexes the files, writes
// metadata.json (`meta` plus the tensor index and a checksum), renames the
// directory into place, updates the latest marker (a log line when it goes
// back) and keeps the last `retain` checkpoints (0: all) among those `ours`
// accepts (null: every one), removing the others of `ours` with a log line.
// NOTE [Whose checkpoints]: the Trainer passes the iterations it saved,
// and, when it resumed from the same folder, those up to the one it loaded;
// another run's checkpoints (--save-into-existing) are never removed.
void commit_save(const std::string& save_dir, int64_t iteration, nlohmann::json meta, int retain,
                 const std::function<bool(int64_t)>& ours = {});
// One process writing a whole model at TP 1 x PP 1 x DP 1 (the converters):
// prepare_save, write_rank_file and commit_save with meta["layout"] set,
// discarding the temporary directory when a write fails.
void save_unsharded(const std::string& save_dir, int64_t iteration, const std::vector<ShardTensor>& tensors,
                    nlohmann::json meta);

struct TensorInfo {
  std::string name;
  Shape global_shape;
  model::ShardDim shard = model::ShardDim::None;
  int tp_size = 1;
  std::vector<std::string> slice_files;  // [tp_rank] -> file name in the iteration directory
};

// A committed checkpoint, opened for reading. Every file it touches is
// validated (see ckpt/safetensors.h); metadata.json carries a CRC of itself.
class CheckpointReader {
 public:
  // iteration -1: the latest. Errors name the directory and the fix.
  static CheckpointReader open(const std::string& dir, int64_t iteration = -1);
  const nlohmann::json& metadata() const { return meta_; }
  int64_t iteration() const { return iteration_; }
  const std::string& path() const { return path_; }
  config::GptConfig config() const;
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;
  std::vector<std::string> tensor_names() const;
  // The full tensor (its saved global shape, f32), assembled from the tp slices.
  Tensor read_full(const std::string& name) const;
  // Opens every file the metadata lists (size and header checksum): throws
  // the first damage found without reading any tensor data.
  void verify() const;

 private:
  const SafetensorsFile& file(const std::string& name) const;
  std::string path_;
  int64_t iteration_ = 0;
  nlohmann::json meta_;
  std::map<std::string, TensorInfo> tensors_;
  mutable std::map<std::string, std::shared_ptr<SafetensorsFile>> files_;
};

// The committed iterations in DIR (iter_NNNNNNN directories), ascending.
std::vector<int64_t> committed_iterations(const std::string& dir);
// The newest iteration below `before` whose checkpoint opens and verifies
// (CheckpointReader::verify), or -1 when there is none.
int64_t newest_intact_iteration(const std::string& dir, int64_t before);

// Reads and validates DIR/iter_X/metadata.json (checksum included).
nlohmann::json read_metadata(const std::string& path);

}  // namespace tripod::ckpt
