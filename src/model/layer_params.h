// The parameters of one pipeline stage as typed handles, resolved once when
// the model is built (llm.c's ParameterTensors): the forward, backward and
// optimizer paths never look a parameter up by name. Each handle points into
// the stage's ParamStore (value, grad, compute copy); the shapes are this tp
// rank's (config/gpt_config.h has the letters). Names in the comments are
// the Megatron-core checkpoint keys, which stay as they are.
#pragma once

#include <cstdint>
#include <vector>

#include "model/param_table.h"
#include "config/gpt_config.h"

namespace tripod::model {

// One expert's MLP (an MoE layer's routed expert or its shared expert):
// fc1 [F1/tp, C] (F1 = 2Fe under --swiglu, [gate | up]), fc2 [C, Fe/tp];
// biases null under --disable-bias-linear.
struct ExpertParams {
  Param* fc1_weight = nullptr;
  Param* fc1_bias = nullptr;
  Param* fc2_weight = nullptr;
  Param* fc2_bias = nullptr;  // replicated, added after the tp reduction
};

// decoder.layers.<l>.mlp.* of an MoE layer (model/moe_layer.h): the router
// (E, C), DeepSeek-V3's expert bias (E; never has a gradient: updated from
// the token counts after each step), this rank's experts, and the shared
// expert with its gate (1, C) (null when the config has none).
struct MoeParams {
  Param* router_weight = nullptr;  // mlp.router.weight, f32 compute
  Param* expert_bias = nullptr;    // mlp.router.expert_bias
  int64_t first_expert = 0;        // global index of experts[0]
  std::vector<ExpertParams> experts;  // mlp.experts.local_experts.<first_expert + i>.*
  ExpertParams shared;             // mlp.shared_experts.linear_fc1/2
  Param* shared_gate = nullptr;    // mlp.shared_experts.gate_weight
};

// decoder.layers.<l>.*. Biases are null under --disable-bias-linear, the
// norm biases under --normalization RMSNorm; qkv is (NH_tp + 2 G_tp) HS
// rows, fc1 [gate_tp | up_tp] 2F/tp rows under --swiglu.
struct LayerParams {
  Param* input_layernorm_weight = nullptr;    // [C]        input_layernorm.weight, f32
  Param* input_layernorm_bias = nullptr;      // [C]        input_layernorm.bias, f32
  Param* linear_qkv_weight = nullptr;         // [3C/tp, C] qkv weight, column-parallel ([Q_tp | K_tp | V_tp])
  Param* linear_qkv_bias = nullptr;           // [3C/tp]    qkv bias, column-parallel
  Param* linear_proj_weight = nullptr;        // [C, C/tp]  attention output weight, row-parallel
  Param* q_layernorm_weight = nullptr;        // [HS]       --qk-layernorm, replicated, f32
  Param* q_layernorm_bias = nullptr;          // [HS]       (LayerNorm only)
  Param* k_layernorm_weight = nullptr;        // [HS]
  Param* k_layernorm_bias = nullptr;          // [HS]
  Param* linear_proj_bias = nullptr;          // [C]        replicated, added after the tp reduction
  Param* pre_mlp_layernorm_weight = nullptr;  // [C]        pre_mlp_layernorm.weight, f32
  Param* pre_mlp_layernorm_bias = nullptr;    // [C]        pre_mlp_layernorm.bias, f32
  Param* linear_fc1_weight = nullptr;         // [F/tp, C]  MLP up weight, column-parallel
  Param* linear_fc1_bias = nullptr;           // [F/tp]     column-parallel
  Param* linear_fc2_weight = nullptr;         // [C, F/tp]  MLP down weight, row-parallel
  Param* linear_fc2_bias = nullptr;           // [C]        replicated, added after the tp reduction
  MoeParams moe;                              // an MoE layer's MLP (its linear_fc1/2 are null)
};

// embedding.*: the word embedding on the first stage (input) and on the
// last stage (the tied output layer's weight); positions on the first only.
struct EmbeddingParams {
  Param* word_embeddings = nullptr;      // [Vp/tp, C] vocab-parallel
  Param* position_embeddings = nullptr;  // [P, C]     replicated (P = max positions); null without learned positions
  Param* output_layer = nullptr;         // [Vp/tp, C] output_layer.weight, last stage, untied models only
};

// decoder.final_layernorm.*: last stage only.
struct FinalNormParams {
  Param* weight = nullptr;  // [C] f32
  Param* bias = nullptr;    // [C] f32; null under RMSNorm
};

struct StageParams {
  EmbeddingParams embedding;
  std::vector<LayerParams> layers;  // local layers: index l - first_layer
  FinalNormParams final_layernorm;
};

// Whether a stage holding layers [first_layer, first_layer + num_layers)
// (pre_process: the embedding; post_process: final norm and output layer,
// the word embedding itself when `tied`) holds the parameter, by its role.
bool stage_holds(const ParamSpec& spec, int64_t first_layer, int64_t num_layers, bool pre_process,
                 bool post_process, bool tied = true);

// Walks the store once and fills the handles by role. Checks that every
// local layer is complete and that nothing is held twice.
// `config` says which parameters the model has (biases, norms, positions,
// output layer).
using config::GptConfig;
StageParams resolve_params(ParamStore& store, const GptConfig& config, int64_t first_layer, int64_t num_layers,
                           bool pre_process, bool post_process);

}  // namespace tripod::model
