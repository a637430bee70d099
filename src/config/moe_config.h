// Mixture-of-experts options (Megatron-core's TransformerConfig moe_*
// fields, with Megatron's flag spellings; the string-valued ones are kept as
// Megatron keeps them and checked by finalize()):
//   --num-experts E                      0: a dense model
//   --moe-ffn-hidden-size Fe             each expert's MLP width (default --ffn-hidden-size)
//   --moe-router-topk k                  experts per token
//   --moe-router-score-function softmax | sigmoid
//   --moe-router-pre-softmax             softmax over all experts, then top-k (Qwen2-MoE,
//                                        no renormalisation); default: top-k logits, then
//                                        softmax over the k (Mixtral)
//   --moe-router-topk-scaling-factor s   probs *= s (0: none)
//   --moe-router-dtype fp32              the router GEMM in f32 (the score function always is)
//   --moe-shared-expert-intermediate-size Fs   a shared expert of width Fs beside the routed ones
//   --moe-shared-expert-gate             Qwen2-MoE's sigmoid gate on the shared expert's output
//   --moe-router-load-balancing-type aux_loss | seq_aux_loss | none
//   --moe-aux-loss-coeff a, --moe-z-loss-coeff z
//   --moe-router-enable-expert-bias, --moe-router-bias-update-rate u
//                                        DeepSeek-V3's aux-loss-free balancing: a per-expert
//                                        bias added to the scores for the top-k choice only
//   --moe-expert-capacity-factor c, --moe-token-drop-policy probs | position
//                                        capacity ceil(N k / E * c) tokens per expert; the rest
//                                        dropped (default: dropless)
//   --moe-layer-freq 1 | N | "[1,0,1,...]" | "([1]*3+[0])*2"   which layers are MoE
//   --moe-token-dispatcher-type alltoall | allgather
//   --moe-grouped-gemm                   the experts' forward and data-gradient GEMMs grouped (model/moe_experts.cpp)
// Which layers are MoE is GptConfig::layer_spec(i).mlp (is_moe_layer below):
// the one rule for the model, the planner and the checkpoint. docs/moe.md is
// the guide.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tripod::config {

struct MoeConfig {
  int64_t num_experts = 0;                // E; 0 = no MoE layers
  int64_t ffn_hidden_size = 0;            // Fe; 0 -> GptConfig::ffn_hidden_size
  int64_t router_topk = 2;                // k
  std::string router_score_function = "softmax";  // softmax | sigmoid
  bool router_pre_softmax = false;
  float router_topk_scaling_factor = 0.f;  // 0: no scaling
  std::string router_dtype;               // "" (the compute dtype) | fp32
  int64_t shared_expert_intermediate_size = 0;  // Fs; 0: no shared expert
  bool shared_expert_gate = false;
  std::string router_load_balancing_type = "aux_loss";  // aux_loss | seq_aux_loss | none
  float aux_loss_coeff = 0.f;
  float z_loss_coeff = 0.f;
  bool router_enable_expert_bias = false;
  float router_bias_update_rate = 1e-3f;
  float expert_capacity_factor = 0.f;     // <= 0: dropless
  std::string token_drop_policy = "probs";  // probs | position
  std::string layer_freq = "1";           // --moe-layer-freq, as spelled
  std::string token_dispatcher_type = "alltoall";  // alltoall | allgather
  bool grouped_gemm = false;              // grouped expert GEMMs; the same numbers as the loop

  bool enabled() const { return num_experts > 0; }
  bool sigmoid() const { return router_score_function == "sigmoid"; }
  bool seq_aux_loss() const { return router_load_balancing_type == "seq_aux_loss"; }
  // The load-balancing loss coefficient in effect (0 under "none").
  float balancing_coeff() const { return router_load_balancing_type == "none" ? 0.f : aux_loss_coeff; }
  bool dropless() const { return expert_capacity_factor <= 0.f; }
  // Megatron's get_capacity: ceil(tokens * k / E * capacity factor).
  int64_t capacity(int64_t tokens) const;
  // Fills the derived sizes and checks every rule (errors name the flag
  // and the fix). ffn: the dense MLP width (Fe's default).
  void finalize(int64_t num_layers, int64_t ffn);
  // Whether layer `layer` of `num_layers` is an MoE layer (--moe-layer-freq).
  bool is_moe_layer(int64_t layer, int64_t num_layers) const;
  std::string describe() const;  // "8 experts, top-2 softmax, ffn 128, aux_loss 0.01"
};

// --moe-layer-freq's pattern over num_layers layers (1: MoE, 0: dense):
// an integer N (every N-th layer from layer 0, Megatron's rule), a list
// "[1,0,1,1]", or Megatron's Python expression over lists, "+" and "* N"
// ("([1]*3+[0]*1)*2"). Throws Error naming the flag on anything else.
std::vector<int> moe_layer_pattern(const std::string& freq, int64_t num_layers);

}  // namespace tripod::config
