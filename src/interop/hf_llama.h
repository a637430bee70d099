// Hugging Face LlamaForCausalLM export and import (`tripod convert`, for a
// checkpoint of the Llama family: RMSNorm, RoPE, SwiGLU; docs/llama.md).
//
// Names and layouts (tripod's Megatron-core name -> HF name):
//   embedding.word_embeddings.weight (Vp, C)   -> model.embed_tokens.weight (V, C)   unpadded rows
//   decoder.layers.i.input_layernorm.weight    -> model.layers.i.input_layernorm.weight
//   ...self_attention.linear_qkv.weight        -> ...self_attn.{q,k,v}_proj.weight
//        grouped (G, k+2, HS, C): per group its k query heads, then K, then V
//        (Megatron's layout); q_proj = the query heads in order g*k + j, k_proj
//        and v_proj the groups' K and V heads. Without grouped-query attention
//        (3C, C) = [Q | K | V].
//   ...self_attention.linear_proj.weight       -> ...self_attn.o_proj.weight
//   ...pre_mlp_layernorm.weight                -> ...post_attention_layernorm.weight
//   ...mlp.linear_fc1.weight (2F, C) [gate|up] -> ...mlp.gate_proj.weight, ...mlp.up_proj.weight
//   ...mlp.linear_fc2.weight (C, F)            -> ...mlp.down_proj.weight
//   decoder.final_layernorm.weight             -> model.norm.weight
//   output_layer.weight (Vp, C)                -> lm_head.weight (V, C) (untied only)
// Biases (without --disable-bias-linear) go to the same names' .bias with
// attention_bias and mlp_bias true. Both sides compute y = x W^T.
//
// Rotary embedding: tripod's RoPE op rotates the two halves of each head
// (rotate_half, Hugging Face's LlamaRotaryEmbedding and Megatron-core's
// default), so q_proj and k_proj rows are copied as they are: no
// permutation (the permutation in HF's convert_llama_weights_to_hf.py
// turns Meta's interleaved-pair weights into this convention).
//
// With --qk-layernorm (RMSNorm, no biases) they write and read
// Qwen3ForCausalLM: self_attention.{q,k}_layernorm.weight (HS) ->
// self_attn.{q,k}_norm.weight, config.json model_type qwen3 with head_dim;
// a head_dim other than hidden_size / num_attention_heads is refused.
// With --num-experts the same functions write and read MixtralForCausalLM,
// Qwen2MoeForCausalLM and Qwen3MoeForCausalLM: interop/hf_moe.h maps the
// MoE layers and config.
//
// Relates to: cli/convert.cpp, interop/hf_gpt2.h, interop/hf_moe.h, scripts/gpu_llama_hf_check.py.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "ckpt/sharded_checkpoint.h"
#include "interop/hf_weights.h"

namespace tripod::interop {

// Whether a tripod config is of the Llama family HF's LlamaForCausalLM can
// hold (RMSNorm, RoPE over whole heads, SwiGLU, no learned positions).
// `why` gets the first difference.
bool is_hf_llama(const config::GptConfig& c, std::string* why);

// Writes OUT/config.json and the weights from a tripod checkpoint: one
// model.safetensors, or shards and their index above max_shard_size bytes
// (interop/hf_weights.h).
void export_hf_llama(const ckpt::CheckpointReader& reader, const std::string& out_dir,
                     uint64_t max_shard_size = kDefaultMaxShardSize);

// Reads IN/config.json + IN's weights (model.safetensors, or the shards of
// model.safetensors.index.json: interop/hf_weights.h) and writes a tripod
// checkpoint (iteration 0, tp 1, weights only) into save_dir. `extra` is
// merged into the metadata. Returns the model arguments.
config::GptConfig import_hf_llama(const std::string& in_dir, const std::string& save_dir,
                                 const nlohmann::json& extra);

// Qwen3ForCausalLM and Qwen3MoeForCausalLM (or their model_type): the
// Llama layout plus q_norm / k_norm per head (--qk-layernorm).
bool is_hf_qwen3_architecture(const std::string& arch);
// Every class these functions read: Llama, Qwen3, and the MoE classes.
bool is_hf_llama_architecture(const std::string& arch);

// The "architectures" entry of IN/config.json ("" when absent).
std::string hf_architecture(const std::string& in_dir);

}  // namespace tripod::interop
