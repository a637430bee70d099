// Hugging Face GPT-2 export and import (`tripod convert`).
//
// Names and layouts (tripod's Megatron-core name -> HF GPT2Model name):
//   embedding.word_embeddings.weight (Vp, C)    -> wte.weight (V, C)        unpadded rows
//   embedding.position_embeddings.weight        -> wpe.weight
//   decoder.layers.i.input_layernorm.*          -> h.i.ln_1.*
//   ...self_attention.linear_qkv.weight (3C, C) -> h.i.attn.c_attn.weight (C, 3C)   transposed
//   ...self_attention.linear_qkv.bias (3C)      -> h.i.attn.c_attn.bias
//   ...self_attention.linear_proj.weight (C, C) -> h.i.attn.c_proj.weight           transposed
//   ...pre_mlp_layernorm.*                      -> h.i.ln_2.*
//   ...mlp.linear_fc1.weight (F, C)             -> h.i.mlp.c_fc.weight (C, F)       transposed
//   ...mlp.linear_fc2.weight (C, F)             -> h.i.mlp.c_proj.weight (F, C)     transposed
//   decoder.final_layernorm.*                   -> ln_f.*
// HF's Conv1D computes y = x W + b with W (in, out); tripod's linear layers
// compute y = x W^T + b with W (out, in), hence the transposes. Both keep
// the fused QKV as [Q | K | V] with heads contiguous inside each third.
// The output layer is tied to wte in both (no lm_head.weight is written).
//
// Relates to: cli/convert.cpp, ckpt/sharded_checkpoint.h, tests/ckpt/hf_gpt2_forward.py.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "ckpt/sharded_checkpoint.h"
#include "interop/hf_weights.h"

namespace tripod::interop {

// Writes OUT/config.json and the weights from a tripod checkpoint: one
// model.safetensors, or shards and their index above max_shard_size bytes
// (interop/hf_weights.h).
void export_hf_gpt2(const ckpt::CheckpointReader& reader, const std::string& out_dir,
                    uint64_t max_shard_size = kDefaultMaxShardSize);

// Reads IN/config.json + IN's weights (model.safetensors or shards) and writes a tripod checkpoint
// (iteration 0, tp 1, weights only) into save_dir. `extra` is merged into
// the metadata (tokenizer files, seed). Returns the model arguments.
config::GptConfig import_hf_gpt2(const std::string& in_dir, const std::string& save_dir,
                                const nlohmann::json& extra);

// The HF name of a tripod parameter and whether it is stored transposed
// ("" for names HF does not have).
std::string hf_name(const std::string& tripod_name, bool* transposed);

}  // namespace tripod::interop
