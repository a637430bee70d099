// `tripod convert --export-hf OUT`: a tripod checkpoint to a Hugging Face
// folder (GPT-2 or Llama, by the model), written whole or not at all.
//
// NOTE [Export folder]: OUT must be missing or empty unless `replace` is
// given (another model's tokenizer or shard index left beside the new
// weights would be read with them). The files are written into a temporary
// sibling folder (.OUT.tmp-<pid>) and fsynced; then an existing OUT is moved
// aside (.OUT.old-<pid>), the new folder renamed into place and the old one
// removed. A failure (a full disk, a kill) before the rename leaves OUT as it
// was; the temporary is removed on an error, or by the next export into the
// same parent when its process is gone.
#pragma once

#include <string>

#include "ckpt/sharded_checkpoint.h"
#include "interop/hf_weights.h"

namespace tripod::interop {

// max_shard_size: the weights are one model.safetensors up to this many
// bytes, shards with model.safetensors.index.json above (--max-shard-size).
void export_hf(const ckpt::CheckpointReader& reader, const std::string& out_dir, bool replace,
               uint64_t max_shard_size = kDefaultMaxShardSize);

}  // namespace tripod::interop
