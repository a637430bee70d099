// Megatron-LM checkpoints: importing the legacy format (`--ckpt-format
// torch`). Recognising them where a tripod checkpoint is expected, and the
// directory layout, is ckpt/megatron_layout.h.
//
// Legacy layout (megatron/training/checkpointing.py):
//   DIR/latest_checkpointed_iteration.txt        "N" or "release"
//   DIR/iter_000000N/mp_rank_TT/model_optim_rng.pt        PP = 1
//   DIR/iter_000000N/mp_rank_TT_PPP/model_optim_rng.pt    PP > 1
// Each file is a torch.save dict: "args" (argparse.Namespace), "iteration",
// "model" (or "model0", "model1", ... with a virtual pipeline), "optimizer",
// "rng_state", ... read with interop/torch_pickle.h (no code runs).
// The torch_dist format (iter_N/.metadata, __*_*.distcp, common.pt) is
// recognised and named; Megatron itself converts it to the legacy format.
//
// Merging the model-parallel shards of a Megatron-core GPT (local or
// Transformer Engine layers) into tripod's full tensors:
//   column-parallel (linear_fc1, word embeddings): TP slices concatenated on rows
//   row-parallel (linear_proj, linear_fc2): concatenated on columns
//   linear_qkv: each TP rank holds its heads as [q_h, k_h, v_h] per head;
//     tripod's full tensor is [Q | K | V] with heads contiguous in each third
//   layer i of pp rank p (virtual chunk v) is global layer
//     v * (L / vpp) + p * (L / (pp * vpp)) + i
//   Transformer Engine's fused norms (linear_qkv.layer_norm_weight,
//     linear_fc1.layer_norm_weight) are tripod's input/pre-MLP LayerNorms.
//
// Relates to: cli/convert.cpp, ckpt/megatron_layout.h, ckpt/sharded_checkpoint.h,
// docs/checkpoints.md.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "config/gpt_config.h"

namespace tripod::interop {

struct MegatronImport {
  config::GptConfig config;
  int64_t iteration = 0;
  int64_t consumed_samples = 0;
  int tp = 1, pp = 1, vpp = 1;
};

// Reads a legacy Megatron checkpoint (DIR as given to Megatron's --load, or
// DIR/iter_N) and writes its model weights as a tripod checkpoint at the
// same iteration into save_dir (no optimizer state). `extra` is merged
// into the metadata (tokenizer files).
MegatronImport import_megatron(const std::string& dir, const std::string& save_dir, const nlohmann::json& extra);

}  // namespace tripod::interop
