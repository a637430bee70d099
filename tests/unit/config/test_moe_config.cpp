// config/moe_config.h: --moe-layer-freq's forms, the capacity rule, the
// checks, and what an MoE layer's spec counts.
#include <gtest/gtest.h>

#include "base/error.h"
#include "config/gpt_config.h"
#include "config/moe_config.h"

namespace tripod::config {
namespace {

TEST(MoeConfig, LayerFreqForms) {
  EXPECT_EQ(moe_layer_pattern("1", 3), (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(moe_layer_pattern("2", 5), (std::vector<int>{1, 0, 1, 0, 1}));  // Megatron: i % N == 0
  EXPECT_EQ(moe_layer_pattern("[0,1, 1]", 3), (std::vector<int>{0, 1, 1}));
  EXPECT_EQ(moe_layer_pattern("([1]*3+[0]*1)*2", 8), (std::vector<int>{1, 1, 1, 0, 1, 1, 1, 0}));
  EXPECT_EQ(moe_layer_pattern("[0]+[1]*2", 3), (std::vector<int>{0, 1, 1}));
  EXPECT_THROW(moe_layer_pattern("[1,0]", 3), Error);   // wrong length
  EXPECT_THROW(moe_layer_pattern("[1,2,0]", 3), Error);  // not 0/1
  EXPECT_THROW(moe_layer_pattern("([1]*3", 3), Error);
  EXPECT_THROW(moe_layer_pattern("0", 3), Error);
  EXPECT_THROW(moe_layer_pattern("x", 3), Error);
}

TEST(MoeConfig, CapacityIsMegatronsCeiling) {
  MoeConfig m;
  m.num_experts = 8;
  m.router_topk = 2;
  m.expert_capacity_factor = 1.0f;
  EXPECT_EQ(m.capacity(64), 16);  // 64 * 2 / 8
  m.expert_capacity_factor = 1.1f;
  EXPECT_EQ(m.capacity(64), 18);  // ceil(17.6)
}

TEST(MoeConfig, ChecksNameTheFlag) {
  auto bad = [](auto edit) {
    GptConfig c;
    c.vocab_size = 100;
    c.moe.num_experts = 4;
    edit(c.moe);
    try {
      c.finalize();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(bad([](MoeConfig& m) { m.router_topk = 5; }).find("--moe-router-topk"), std::string::npos);
  EXPECT_NE(bad([](MoeConfig& m) { m.router_score_function = "tanh"; }).find("--moe-router-score-function"),
            std::string::npos);
  EXPECT_NE(bad([](MoeConfig& m) { m.router_enable_expert_bias = true; }).find("sigmoid"), std::string::npos);
  EXPECT_NE(bad([](MoeConfig& m) { m.router_load_balancing_type = "sinkhorn"; }).find("load-balancing"),
            std::string::npos);
  EXPECT_NE(bad([](MoeConfig& m) { m.shared_expert_gate = true; }).find("--moe-shared-expert"), std::string::npos);
  EXPECT_EQ(bad([](MoeConfig&) {}), "");
  GptConfig dense;
  dense.vocab_size = 100;
  dense.moe.shared_expert_intermediate_size = 32;  // without --num-experts
  EXPECT_THROW(dense.finalize(), Error);
}

TEST(MoeConfig, LayerSpecCountsExpertsAndActiveParameters) {
  GptConfig c;
  c.vocab_size = 100;
  c.num_layers = 4;
  c.hidden_size = 16;
  c.num_attention_heads = 2;
  c.ffn_hidden_size = 32;
  c.moe.num_experts = 4;
  c.moe.router_topk = 2;
  c.moe.ffn_hidden_size = 8;
  c.moe.shared_expert_intermediate_size = 12;
  c.moe.shared_expert_gate = true;
  c.moe.layer_freq = "[0,1,0,1]";
  c.finalize();
  const LayerSpec dense = c.layer_spec(0), moe = c.layer_spec(1);
  EXPECT_EQ(dense.mlp, MlpKind::Dense);
  EXPECT_EQ(moe.mlp, MlpKind::Moe);
  const int64_t C = 16;
  // Counted by hand: attention and norms as a dense layer, then the router
  // (E, C), four experts and the shared expert (fc1 (f, C) + bias f, fc2
  // (C, f) + bias C) and the gate (1, C).
  const int64_t attention_and_norms = dense.num_parameters() - (32 * C + 32 + C * 32 + C);
  const int64_t expert = 8 * C + 8 + C * 8 + C, shared = 12 * C + 12 + C * 12 + C;
  EXPECT_EQ(moe.num_parameters(), attention_and_norms + 4 * C + 4 * expert + shared + C);
  EXPECT_EQ(moe.active_parameters(), moe.num_parameters() - 2 * expert);
  EXPECT_EQ(moe.tp_sharded_parameters() + moe.tp_replicated_parameters(), moe.num_parameters());
  // Tensor parallelism splits attention and the shared expert (its fc2 bias
  // stays whole, as a dense MLP's); the routed experts are whole on every tp
  // rank (expert tensor parallelism 1), as are the router and the gate.
  EXPECT_EQ(moe.tp_sharded_parameters(), dense.tp_sharded_parameters() - (32 * C + 32 + C * 32) + 12 * C + 12 + C * 12);
  EXPECT_EQ(moe.tp_replicated_parameters(), dense.tp_replicated_parameters() - C + C + 4 * C + 4 * expert + C);
}

}  // namespace
}  // namespace tripod::config
