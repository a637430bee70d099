// Implementation of model/layer_params.h.
#include "model/layer_params.h"

#include "base/error.h"

namespace tripod::model {

bool stage_holds(const ParamSpec& s, int64_t first_layer, int64_t num_layers, bool pre_process,
                 bool post_process) {
  if (s.layer >= 0) return s.layer >= first_layer && s.layer < first_layer + num_layers;
  switch (s.role) {
    case ParamRole::WordEmbeddings: return pre_process || post_process;  // tied output layer
    case ParamRole::PositionEmbeddings: return pre_process;
    case ParamRole::FinalLayernormWeight: case ParamRole::FinalLayernormBias: return post_process;
    default: return false;
  }
}

StageParams resolve_params(ParamStore& store, int64_t first_layer, int64_t num_layers, bool pre_process,
                           bool post_process) {
  StageParams sp;
  sp.layers.resize(static_cast<size_t>(num_layers));
  auto set = [](Param*& slot, Param& p) {
    TRIPOD_CHECK(slot == nullptr, "parameter {} resolved twice (duplicate role)", p.spec.name);
    slot = &p;
  };
  for (Param& p : store.params()) {
    const ParamSpec& s = p.spec;
    if (s.layer >= 0) {
      TRIPOD_CHECK(s.layer >= first_layer && s.layer < first_layer + num_layers,
                   "parameter {} of layer {} outside the stage's layers [{}, {})", s.name, s.layer, first_layer,
                   first_layer + num_layers);
      LayerParams& l = sp.layers[static_cast<size_t>(s.layer - first_layer)];
      switch (s.role) {
        case ParamRole::InputLayernormWeight: set(l.input_layernorm_weight, p); break;
        case ParamRole::InputLayernormBias: set(l.input_layernorm_bias, p); break;
        case ParamRole::LinearQkvWeight: set(l.linear_qkv_weight, p); break;
        case ParamRole::LinearQkvBias: set(l.linear_qkv_bias, p); break;
        case ParamRole::LinearProjWeight: set(l.linear_proj_weight, p); break;
        case ParamRole::LinearProjBias: set(l.linear_proj_bias, p); break;
        case ParamRole::PreMlpLayernormWeight: set(l.pre_mlp_layernorm_weight, p); break;
        case ParamRole::PreMlpLayernormBias: set(l.pre_mlp_layernorm_bias, p); break;
        case ParamRole::LinearFc1Weight: set(l.linear_fc1_weight, p); break;
        case ParamRole::LinearFc1Bias: set(l.linear_fc1_bias, p); break;
        case ParamRole::LinearFc2Weight: set(l.linear_fc2_weight, p); break;
        case ParamRole::LinearFc2Bias: set(l.linear_fc2_bias, p); break;
        default: TRIPOD_CHECK(false, "parameter {} of layer {} has no layer role", s.name, s.layer);
      }
      continue;
    }
    switch (s.role) {
      case ParamRole::WordEmbeddings: set(sp.embedding.word_embeddings, p); break;
      case ParamRole::PositionEmbeddings: set(sp.embedding.position_embeddings, p); break;
      case ParamRole::FinalLayernormWeight: set(sp.final_layernorm.weight, p); break;
      case ParamRole::FinalLayernormBias: set(sp.final_layernorm.bias, p); break;
      default: TRIPOD_CHECK(false, "parameter {} has no role outside the layers", s.name);
    }
  }
  for (size_t i = 0; i < sp.layers.size(); ++i) {
    const LayerParams& l = sp.layers[i];
    for (const Param* h : {l.input_layernorm_weight, l.input_layernorm_bias, l.linear_qkv_weight, l.linear_qkv_bias,
                           l.linear_proj_weight, l.linear_proj_bias, l.pre_mlp_layernorm_weight,
                           l.pre_mlp_layernorm_bias, l.linear_fc1_weight, l.linear_fc1_bias, l.linear_fc2_weight,
                           l.linear_fc2_bias})
      TRIPOD_CHECK(h != nullptr, "layer {} is missing a parameter", first_layer + static_cast<int64_t>(i));
  }
  TRIPOD_CHECK(!(pre_process || post_process) || sp.embedding.word_embeddings,
               "the first and last stages need the word embedding");
  TRIPOD_CHECK(!pre_process || sp.embedding.position_embeddings, "the first stage needs the position embedding");
  TRIPOD_CHECK(!post_process || (sp.final_layernorm.weight && sp.final_layernorm.bias),
               "the last stage needs the final LayerNorm");
  return sp;
}

}  // namespace tripod::model
