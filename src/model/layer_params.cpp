// Implementation of model/layer_params.h.
#include "model/layer_params.h"

#include "base/error.h"
#include "config/gpt_config.h"

namespace tripod::model {

bool stage_holds(const ParamSpec& s, int64_t first_layer, int64_t num_layers, bool pre_process,
                 bool post_process, bool tied) {
  if (s.layer >= 0) return s.layer >= first_layer && s.layer < first_layer + num_layers;
  switch (s.role) {
    case ParamRole::WordEmbeddings: return pre_process || (post_process && tied);  // tied output layer
    case ParamRole::PositionEmbeddings: return pre_process;
    case ParamRole::FinalLayernormWeight: case ParamRole::FinalLayernormBias: return post_process;
    case ParamRole::OutputLayerWeight: return post_process;
    default: return false;
  }
}

namespace {

void check_moe_params(const MoeParams& m, const config::LayerSpec& spec, int64_t layer) {
  const bool shared = spec.shared_expert_size > 0;
  auto complete = [&](const ExpertParams& e, bool needed) {
    return (e.fc1_weight != nullptr) == needed && (e.fc2_weight != nullptr) == needed &&
           (e.fc1_bias != nullptr) == (needed && spec.bias) && (e.fc2_bias != nullptr) == (needed && spec.bias);
  };
  bool ok = m.router_weight && (m.expert_bias != nullptr) == spec.expert_bias && !m.experts.empty() &&
            complete(m.shared, shared) && (m.shared_gate != nullptr) == spec.shared_expert_gate;
  for (const ExpertParams& e : m.experts) ok = ok && complete(e, true);
  TRIPOD_CHECK(ok, "MoE layer {} is missing a parameter or has one its config does not", layer);
}

}  // namespace

StageParams resolve_params(ParamStore& store, const GptConfig& c, int64_t first_layer, int64_t num_layers,
                           bool pre_process, bool post_process) {
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
        case ParamRole::QLayernormWeight: set(l.q_layernorm_weight, p); break;
        case ParamRole::QLayernormBias: set(l.q_layernorm_bias, p); break;
        case ParamRole::KLayernormWeight: set(l.k_layernorm_weight, p); break;
        case ParamRole::KLayernormBias: set(l.k_layernorm_bias, p); break;
        case ParamRole::PreMlpLayernormWeight: set(l.pre_mlp_layernorm_weight, p); break;
        case ParamRole::PreMlpLayernormBias: set(l.pre_mlp_layernorm_bias, p); break;
        case ParamRole::LinearFc1Weight: set(l.linear_fc1_weight, p); break;
        case ParamRole::LinearFc1Bias: set(l.linear_fc1_bias, p); break;
        case ParamRole::LinearFc2Weight: set(l.linear_fc2_weight, p); break;
        case ParamRole::LinearFc2Bias: set(l.linear_fc2_bias, p); break;
        case ParamRole::RouterWeight: set(l.moe.router_weight, p); break;
        case ParamRole::RouterExpertBias: set(l.moe.expert_bias, p); break;
        case ParamRole::SharedExpertFc1Weight: set(l.moe.shared.fc1_weight, p); break;
        case ParamRole::SharedExpertFc1Bias: set(l.moe.shared.fc1_bias, p); break;
        case ParamRole::SharedExpertFc2Weight: set(l.moe.shared.fc2_weight, p); break;
        case ParamRole::SharedExpertFc2Bias: set(l.moe.shared.fc2_bias, p); break;
        case ParamRole::SharedExpertGateWeight: set(l.moe.shared_gate, p); break;
        case ParamRole::ExpertFc1Weight: case ParamRole::ExpertFc1Bias: case ParamRole::ExpertFc2Weight:
        case ParamRole::ExpertFc2Bias: {
          MoeParams& m = l.moe;
          if (m.experts.empty()) m.first_expert = s.expert;  // the specs list a layer's experts in order
          const int64_t i = s.expert - m.first_expert;
          TRIPOD_CHECK(i >= 0 && i <= static_cast<int64_t>(m.experts.size()),
                       "parameter {}: expert {} is not next to this rank's experts from {}", s.name, s.expert,
                       m.first_expert);
          if (i == static_cast<int64_t>(m.experts.size())) m.experts.emplace_back();
          ExpertParams& e = m.experts[static_cast<size_t>(i)];
          set(s.role == ParamRole::ExpertFc1Weight   ? e.fc1_weight
              : s.role == ParamRole::ExpertFc1Bias   ? e.fc1_bias
              : s.role == ParamRole::ExpertFc2Weight ? e.fc2_weight
                                                     : e.fc2_bias,
              p);
          break;
        }
        default: TRIPOD_CHECK(false, "parameter {} of layer {} has no layer role", s.name, s.layer);
      }
      continue;
    }
    switch (s.role) {
      case ParamRole::WordEmbeddings: set(sp.embedding.word_embeddings, p); break;
      case ParamRole::PositionEmbeddings: set(sp.embedding.position_embeddings, p); break;
      case ParamRole::FinalLayernormWeight: set(sp.final_layernorm.weight, p); break;
      case ParamRole::FinalLayernormBias: set(sp.final_layernorm.bias, p); break;
      case ParamRole::OutputLayerWeight: set(sp.embedding.output_layer, p); break;
      default: TRIPOD_CHECK(false, "parameter {} has no role outside the layers", s.name);
    }
  }
  const bool bias = c.add_bias_linear, ln_bias = !c.rmsnorm();
  for (size_t i = 0; i < sp.layers.size(); ++i) {
    const LayerParams& l = sp.layers[i];
    const config::LayerSpec spec = c.layer_spec(first_layer + static_cast<int64_t>(i));
    const bool dense = !spec.moe();
    if (!dense) check_moe_params(l.moe, spec, first_layer + static_cast<int64_t>(i));
    // (handle, whether the model has it)
    const std::pair<const Param*, bool> want[] = {
        {l.input_layernorm_weight, true}, {l.input_layernorm_bias, ln_bias}, {l.linear_qkv_weight, true},
        {l.linear_qkv_bias, bias},        {l.linear_proj_weight, true},      {l.linear_proj_bias, bias},
        {l.pre_mlp_layernorm_weight, true}, {l.pre_mlp_layernorm_bias, ln_bias}, {l.linear_fc1_weight, dense},
        {l.linear_fc1_bias, bias && dense}, {l.linear_fc2_weight, dense},    {l.linear_fc2_bias, bias && dense}};
    for (const auto& [h, needed] : want)
      TRIPOD_CHECK((h != nullptr) == needed, "layer {} is missing a parameter or has one its config does not",
                   first_layer + static_cast<int64_t>(i));
  }
  const bool untied = c.untie_embeddings_and_output_weights;
  TRIPOD_CHECK(!(pre_process || (post_process && !untied)) || sp.embedding.word_embeddings,
               "the first stage (and the last, with a tied output layer) needs the word embedding");
  TRIPOD_CHECK(!post_process || !untied || sp.embedding.output_layer, "the last stage needs the output layer");
  TRIPOD_CHECK(!pre_process || !c.learned_positions() || sp.embedding.position_embeddings,
               "the first stage needs the position embedding");
  TRIPOD_CHECK(!post_process || (sp.final_layernorm.weight && (sp.final_layernorm.bias != nullptr) == ln_bias),
               "the last stage needs the final norm");
  return sp;
}

}  // namespace tripod::model
