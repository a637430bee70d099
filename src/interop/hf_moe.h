// The mixture-of-experts part of the Hugging Face Llama-family interop
// (interop/hf_llama.h does the rest: embeddings, attention, norms, dense
// MLPs): MixtralForCausalLM, Qwen2MoeForCausalLM and Qwen3MoeForCausalLM
// (Qwen2-MoE's names without the shared expert, plus --qk-layernorm's
// q_norm / k_norm), both ways.
//
// Tensor names (tripod's, under decoder.layers.l.mlp. -> HF's, under model.layers.l.):
//   router.weight (E, C)                          -> Mixtral block_sparse_moe.gate.weight,
//                                                    Qwen2-MoE mlp.gate.weight
//   experts.local_experts.e.linear_fc1.weight     -> experts.e.w1 (gate) + w3 (up)   (Mixtral)
//        (2Fe, C) [gate | up]                        experts.e.gate_proj + up_proj  (Qwen2-MoE)
//   experts.local_experts.e.linear_fc2.weight     -> experts.e.w2 / experts.e.down_proj (C, Fe)
//   shared_experts.linear_fc1/fc2.weight          -> mlp.shared_expert.{gate,up,down}_proj.weight
//   shared_experts.gate_weight (1, C)             -> mlp.shared_expert_gate.weight
// Export writes these per-expert names (the hub checkpoints' layout, which
// every transformers version loads). Import also takes the fused layout
// recent transformers write: mlp.gate.weight, mlp.experts.gate_up_proj
// (E, 2Fe, C) [gate | up] and mlp.experts.down_proj (E, C, Fe), or the same
// transposed ((E, C, 2Fe), (E, Fe, C)) when the shapes tell them apart.
//
// config.json (both ways):
//   Mixtral: num_local_experts = --num-experts, intermediate_size =
//     --moe-ffn-hidden-size, num_experts_per_tok = --moe-router-topk; softmax
//     then top-k then renormalise = tripod's default routing (top-k logits,
//     softmax over them); every layer is MoE.
//   Qwen2-MoE: num_experts, moe_intermediate_size, num_experts_per_tok,
//     norm_topk_prob false = --moe-router-pre-softmax (true: the default
//     routing), shared_expert_intermediate_size with its sigmoid gate =
//     --moe-shared-expert-intermediate-size --moe-shared-expert-gate,
//     decoder_sparse_step / mlp_only_layers = --moe-layer-freq as a list
//     (dense layers of width intermediate_size = --ffn-hidden-size). Its
//     attention's q/k/v biases must be zero on import (tripod has no
//     --add-qkv-bias) and are written as zeros.
//   router_aux_loss_coef = --moe-aux-loss-coeff when output_router_logits is
//     true (transformers adds the loss only then), else 0. It is a training
//     flag a checkpoint does not keep: import reports it (cli/convert.cpp),
//     export writes output_router_logits false and no coefficient.
// Refused (named): sigmoid routing, the expert bias, a top-k scaling factor,
// biases, GELU experts, a shared expert without its gate, pre-softmax
// routing or dense layers without a shared expert (no HF class here), and
// on import router_jitter_noise, a sliding window, unknown expert layouts.
//
// Relates to: interop/hf_llama.cpp, model/moe_layer.h (the names), docs/moe.md.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "config/gpt_config.h"
#include "interop/hf_weights.h"

namespace tripod::interop {

// Whether a config.json "architectures" entry (or model_type) is an MoE
// class tripod reads.
bool is_hf_moe_architecture(const std::string& arch);

// Reads config.json's MoE fields into c (before c.finalize()); c's Llama
// fields are already set. path names the file in errors.
void moe_config_from_hf(const nlohmann::json& j, const std::string& arch, const std::string& path,
                        config::GptConfig& c);

// The HF class an MoE model is written as ("MixtralForCausalLM" or
// "Qwen2MoeForCausalLM"); throws naming what HF cannot hold. `source` names
// the checkpoint in the message.
std::string hf_moe_architecture(const config::GptConfig& c, const std::string& source);

// Rewrites a LlamaForCausalLM config.json object as the MoE class's.
void moe_config_to_hf(const config::GptConfig& c, nlohmann::json& cfg);

// Appends MoE layer `layer`'s tensors under HF names. read(name) returns a
// tripod tensor (name without the "model." prefix).
void moe_layer_to_hf(const config::GptConfig& c, int64_t layer, const std::function<Tensor(const std::string&)>& read,
                     std::vector<std::pair<std::string, Tensor>>& out);

// Reads one tripod MoE tensor of layer `layer` (suffix after
// "decoder.layers.<l>.", e.g. "mlp.experts.local_experts.3.linear_fc1.weight")
// from an HF folder (one file or shards) in either layout.
class HfMoeTensors {
 public:
  HfMoeTensors(const HfWeights& st, const config::GptConfig& c) : st_(st), c_(c) {}
  static bool is_moe_tensor(const std::string& suffix);
  Tensor read(int64_t layer, const std::string& suffix);
  // Qwen2-MoE's attention biases: refused unless zero.
  void check_zero_qkv_bias(int64_t layer) const;

 private:
  Tensor fused(const std::string& name);  // one 3-D tensor, kept while its layer's experts are read
  const HfWeights& st_;
  const config::GptConfig& c_;
  std::string cached_name_;
  Tensor cached_;
};

}  // namespace tripod::interop
