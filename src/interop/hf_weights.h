// The weight files of a Hugging Face folder, as save_pretrained writes them:
// one model.safetensors, or, above max_shard_size (transformers' default
// "5GB"), shards model-00001-of-0000N.safetensors with
// model.safetensors.index.json:
//   {"metadata": {"total_size": <bytes of all tensors>},
//    "weight_map": {"<tensor name>": "model-0000i-of-0000N.safetensors", ...}}
//
// HfWeights::open reads the index and every shard's header (not the data)
// and checks them against each other before anything is imported, naming
// the file: a shard the index names that is missing, a tensor of the
// weight_map absent from its shard, a tensor in two shards or in a shard
// the weight_map does not place it in, a .safetensors file the index does
// not name (another model's left-overs), shards without their index, and a
// folder with only PyTorch .bin weights (with the command that converts
// it). read_f32 then reads one tensor at a time from its shard, so an
// import holds one tensor of the source at a time, never a whole shard.
//
// write_hf_weights is the export side: tensors in the order given, a new
// shard whenever the next tensor would take the current one past
// max_shard_size (a tensor larger than it gets a shard of its own), as
// huggingface_hub's split_torch_state_dict_into_shards; one shard is
// written as model.safetensors without an index, byte for byte what
// write_safetensors writes.
//
// Relates to: ckpt/safetensors.h (one file), interop/hf_llama.h,
// interop/hf_gpt2.h, interop/hf_moe.h, cli/convert.cpp (--max-shard-size).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/safetensors.h"

namespace tripod::interop {

inline constexpr uint64_t kDefaultMaxShardSize = 5'000'000'000ull;  // save_pretrained's "5GB"

// transformers' size syntax: an integer number of bytes, or a number with
// KB/MB/GB (powers of 10) or KiB/MiB/GiB (powers of 2), case-insensitive
// ("5GB", "500MB", "2GiB"). `flag` names the option in errors.
uint64_t parse_shard_size(const std::string& text, const std::string& flag);

class HfWeights {
 public:
  // Opens IN's model.safetensors or model.safetensors.index.json and its shards.
  static HfWeights open(const std::string& in_dir);
  bool contains(const std::string& name) const { return file_of_.count(name) != 0; }
  // The tensor as f32, from the file that holds it.
  Tensor read_f32(const std::string& name) const;
  // The file that holds `name`, or describe() when none does.
  std::string path_of(const std::string& name) const;
  // "IN/model.safetensors" or "IN/model.safetensors.index.json (N shards)", for messages.
  const std::string& describe() const { return describe_; }
  size_t num_files() const { return files_.size(); }

 private:
  std::vector<ckpt::SafetensorsFile> files_;
  std::map<std::string, size_t> file_of_;  // tensor name -> index into files_
  std::string describe_;
};

// Writes `tensors` into `out_dir` as model.safetensors, or as shards and
// model.safetensors.index.json when they exceed max_shard_size bytes.
// Returns the number of files written.
size_t write_hf_weights(const std::string& out_dir, const std::vector<std::pair<std::string, Tensor>>& tensors,
                        uint64_t max_shard_size);

}  // namespace tripod::interop
