// Typed parameters (model/layer_params.h): for every pipeline split of a
// 4-layer model, the stage holds exactly the parameters the Megatron-core
// names say it should, and each typed handle resolved at construction is
// the parameter of the expected checkpoint name. The roles give the same
// LayerNorm set as the names.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "model/gpt_model.h"
#include "testing/tiny_model.h"

namespace tripod {
namespace {

config::GptConfig config() { return testing::tiny_gpt({.num_layers = 4, .vocab_size = 50}); }

// The stage membership rule by name (what the roles replace).
bool held_by_name(const std::string& n, int layer, const model::StageConfig& st) {
  if (layer >= 0) return layer >= st.first_layer && layer < st.first_layer + st.num_local_layers;
  if (n == "embedding.word_embeddings.weight") return st.pre_process || st.post_process;
  if (n == "embedding.position_embeddings.weight") return st.pre_process;
  return n.rfind("decoder.final_layernorm.", 0) == 0 && st.post_process;
}

void expect_handle(model::GptModel& m, const model::Param* h, const std::string& name) {
  ASSERT_NE(h, nullptr) << name;
  EXPECT_EQ(h->spec.name, name);
  EXPECT_EQ(h, m.params().find(name)) << name << ": not the store's parameter";
}

TEST(LayerParams, EveryPipelineSplitResolvesTheExpectedParameters) {
  auto be = backend::make_cpu_backend();
  const auto cfg = config();
  const std::vector<std::pair<int, int>> splits = {{0, 4}, {0, 1}, {1, 2}, {3, 1}, {0, 2}, {2, 2}, {1, 0}};
  for (auto [first, n] : splits) {
    model::StageConfig st;
    st.first_layer = first;
    st.num_local_layers = n;
    st.pre_process = first == 0;
    st.post_process = first + n == cfg.num_layers;
    model::GptModel m(cfg, st, *be);
    const std::string where = fmt::format("layers [{}, {})", first, first + n);
    std::set<std::string> want, got;
    for (const auto& s : model::GptModel::all_param_specs(cfg, m.padded_vocab()))
      if (held_by_name(s.name, s.layer, st)) want.insert(s.name);
    for (const auto& p : m.params().params()) got.insert(p.spec.name);
    EXPECT_EQ(got, want) << where;

    const model::StageParams& sp = m.stage_params();
    ASSERT_EQ(sp.layers.size(), static_cast<size_t>(n)) << where;
    ASSERT_EQ(m.layers().size(), static_cast<size_t>(n)) << where;
    for (int i = 0; i < n; ++i) {
      const model::LayerParams& l = sp.layers[static_cast<size_t>(i)];
      const std::string p = fmt::format("decoder.layers.{}.", first + i);
      // The stage's TransformerLayer i is global layer first + i and holds these handles.
      const model::TransformerLayer& layer = m.layers()[static_cast<size_t>(i)];
      EXPECT_EQ(layer.layer_number(), first + i) << where;
      EXPECT_EQ(layer.params().linear_qkv_weight, l.linear_qkv_weight) << where;
      EXPECT_EQ(layer.params().linear_fc2_bias, l.linear_fc2_bias) << where;
      expect_handle(m, l.input_layernorm_weight, p + "input_layernorm.weight");
      expect_handle(m, l.input_layernorm_bias, p + "input_layernorm.bias");
      expect_handle(m, l.linear_qkv_weight, p + "self_attention.linear_qkv.weight");
      expect_handle(m, l.linear_qkv_bias, p + "self_attention.linear_qkv.bias");
      expect_handle(m, l.linear_proj_weight, p + "self_attention.linear_proj.weight");
      expect_handle(m, l.linear_proj_bias, p + "self_attention.linear_proj.bias");
      expect_handle(m, l.pre_mlp_layernorm_weight, p + "pre_mlp_layernorm.weight");
      expect_handle(m, l.pre_mlp_layernorm_bias, p + "pre_mlp_layernorm.bias");
      expect_handle(m, l.linear_fc1_weight, p + "mlp.linear_fc1.weight");
      expect_handle(m, l.linear_fc1_bias, p + "mlp.linear_fc1.bias");
      expect_handle(m, l.linear_fc2_weight, p + "mlp.linear_fc2.weight");
      expect_handle(m, l.linear_fc2_bias, p + "mlp.linear_fc2.bias");
    }
    if (st.pre_process || st.post_process)
      expect_handle(m, sp.embedding.word_embeddings, "embedding.word_embeddings.weight");
    else
      EXPECT_EQ(sp.embedding.word_embeddings, nullptr) << where;
    if (st.pre_process)
      expect_handle(m, sp.embedding.position_embeddings, "embedding.position_embeddings.weight");
    else
      EXPECT_EQ(sp.embedding.position_embeddings, nullptr) << where;
    if (st.post_process) {
      expect_handle(m, sp.final_layernorm.weight, "decoder.final_layernorm.weight");
      expect_handle(m, sp.final_layernorm.bias, "decoder.final_layernorm.bias");
    } else {
      EXPECT_EQ(sp.final_layernorm.weight, nullptr) << where;
    }
  }
}

TEST(LayerParams, LayerNormRoleMatchesTheNames) {
  const auto cfg = config();
  int n = 0;
  for (const auto& s : model::GptModel::all_param_specs(cfg, 128)) {
    EXPECT_NE(s.role, model::ParamRole::None) << s.name;
    const bool by_name = s.name.find("layernorm.") != std::string::npos;
    EXPECT_EQ(model::is_layernorm(s), by_name) << s.name;
    n += by_name;
  }
  EXPECT_EQ(n, 4 * 4 + 2);
}

TEST(LayerParams, ShardRulesComeFromTheParallelLayers) {
  const auto cfg = config();
  for (const auto& s : model::GptModel::all_param_specs(cfg, 128)) {
    using R = model::ParamRole;
    switch (s.role) {
      case R::LinearFc1Weight: EXPECT_EQ(s.shard, model::ColumnParallelLinear::kWeightShard); break;
      case R::LinearFc1Bias: EXPECT_EQ(s.shard, model::ColumnParallelLinear::kBiasShard); break;
      case R::LinearQkvWeight: case R::LinearQkvBias:
        EXPECT_EQ(s.shard, model::ColumnParallelLinear::kFusedQkvShard); break;
      case R::LinearProjWeight: case R::LinearFc2Weight:
        EXPECT_EQ(s.shard, model::RowParallelLinear::kWeightShard); break;
      case R::LinearProjBias: case R::LinearFc2Bias: EXPECT_EQ(s.shard, model::RowParallelLinear::kBiasShard); break;
      case R::WordEmbeddings: EXPECT_EQ(s.shard, model::VocabParallelEmbedding::kWeightShard); break;
      default: EXPECT_EQ(s.shard, model::ShardDim::None) << s.name;
    }
  }
}

}  // namespace
}  // namespace tripod
