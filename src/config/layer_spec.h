// One transformer layer's shape and kinds, as GptConfig::layer_spec(layer)
// gives them. Per layer, so the coming options can vary it along the stack
// (FP8 keeping the first and last layers in bf16, mixture of experts every
// --moe-layer-freq layers): code that counts or builds a layer reads its
// spec instead of the model-wide fields, and those features change
// layer_spec() and this struct, nowhere else.
#pragma once

#include <cstdint>

#include "config/options.h"

namespace tripod::config {

struct LayerSpec {
  int64_t hidden_size = 0;          // C
  Norm norm = Norm::LayerNorm;      // the input and pre-MLP norms
  AttentionKind attention = AttentionKind::Local;
  int64_t num_attention_heads = 0;  // NH
  int64_t query_groups = 0;         // G (NH without grouped-query attention)
  MlpKind mlp = MlpKind::Dense;
  bool swiglu = false;              // fc1 is [gate | up], 2F rows
  int64_t ffn_hidden_size = 0;      // F
  bool bias = true;                 // --add-bias-linear
  bool qk_layernorm = false;        // --qk-layernorm: a norm of `norm`'s kind over each q and k head (HS wide)
  // The four linears' GEMM precision: FP8 (--fp8-format) or the compute
  // dtype (also under --fp8-format for the layers --first-last-layers-bf16 keeps).
  bool fp8 = false;
  // The attention core on FP8 Q, K, V (--fp8-dot-product-attention), in the
  // FP8 layers only.
  bool fp8_attention = false;
  // MlpKind::Moe (config/moe_config.h): E experts of width Fe (fc1 2Fe rows
  // under SwiGLU), a router (E, C), DeepSeek-V3's expert bias (E), and a
  // shared expert of width Fs (0: none) with its sigmoid gate (1, C).
  int64_t num_experts = 0;           // E
  int64_t moe_ffn_hidden_size = 0;   // Fe
  int64_t router_topk = 0;           // k
  int64_t shared_expert_size = 0;    // Fs
  bool shared_expert_gate = false;
  bool expert_bias = false;

  int64_t head_size() const { return hidden_size / num_attention_heads; }
  // Width of qkv's output: (NH + 2G) HS.
  int64_t qkv_width() const { return (num_attention_heads + 2 * query_groups) * head_size(); }
  // Width of fc1's output: 2F with SwiGLU, else F.
  int64_t fc1_width() const { return swiglu ? 2 * ffn_hidden_size : ffn_hidden_size; }
  // One norm's parameters: a weight (and a bias for LayerNorm).
  int64_t norm_parameters() const { return norm == Norm::RMSNorm ? hidden_size : 2 * hidden_size; }
  bool moe() const { return mlp == MlpKind::Moe; }
  // One expert's (or the shared expert's) fc1 + fc2 parameters at width f,
  // biases included.
  int64_t expert_parameters(int64_t f) const;
  // All the layer's parameters: two norms, qkv, proj, fc1, fc2 and biases
  // (an MoE layer: the router, every expert, the shared expert and its gate).
  int64_t num_parameters() const { return tp_sharded_parameters() + tp_replicated_parameters(); }
  // The parameters one token computes with: an MoE layer counts k of its E
  // experts (MFU on active parameters).
  int64_t active_parameters() const;
  // What tensor parallelism splits: the column-parallel qkv and fc1 (weights
  // and biases) and the row-parallel proj and fc2 weights ...
  int64_t tp_sharded_parameters() const;
  // ... and what every tp rank keeps whole: the norms (q/k norms included)
  // and the row-parallel biases (an MoE layer: also the router, its gate and
  // bias, and every routed expert, which --expert-tensor-parallel-size 1
  // leaves unsplit).
  int64_t tp_replicated_parameters() const;
};

}  // namespace tripod::config
