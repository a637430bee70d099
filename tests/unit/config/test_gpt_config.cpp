// config/: the model shape's arithmetic (parameter count from the per-layer
// specs, the loss-head chunk rule), the option names, and the field list the
// checkpoint metadata is written from.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "base/error.h"
#include "config/gpt_config.h"

namespace tripod::config {
namespace {

GptConfig gpt2_124m() {
  GptConfig c;
  c.num_layers = 12, c.hidden_size = 768, c.num_attention_heads = 12, c.seq_length = 1024, c.vocab_size = 50257;
  c.finalize();
  return c;
}

TEST(GptConfig, ParameterCountFromTheLayerSpecs) {
  const GptConfig c = gpt2_124m();
  // Per layer 4C + 3C^2 + 3C + C^2 + C + 2FC + F + C = 7,087,872 (C 768, F 3072); llm.c prints 124,475,904.
  const LayerSpec ls = c.layer_spec(0);
  EXPECT_EQ(ls.num_parameters(), 7087872);
  EXPECT_EQ(ls.tp_replicated_parameters(), 4 * 768 + 2 * 768);  // two LayerNorms, proj and fc2 biases
  EXPECT_EQ(ls.qkv_width(), c.qkv_width());
  EXPECT_EQ(ls.fc1_width(), c.fc1_width());
  EXPECT_EQ(c.padded_vocab_size(1), 50304);
  EXPECT_EQ(c.num_parameters(50304), 124475904);
}

TEST(GptConfig, LlamaLayerSpec) {
  GptConfig c;
  c.num_layers = 4, c.hidden_size = 64, c.num_attention_heads = 8, c.ffn_hidden_size = 96;
  c.seq_length = 32, c.vocab_size = 100;
  c.group_query_attention = true, c.num_query_groups = 2, c.swiglu = true;
  c.position_embedding_type = Position::Rope, c.normalization = Norm::RMSNorm;
  c.untie_embeddings_and_output_weights = true, c.add_bias_linear = false;
  c.finalize();
  const LayerSpec ls = c.layer_spec(3);
  EXPECT_EQ(ls.norm, Norm::RMSNorm);
  EXPECT_EQ(ls.mlp, MlpKind::Dense);
  EXPECT_EQ(ls.attention, AttentionKind::Local);
  // 2 x 64 (norms) + 96 x 64 (qkv) + 64 x 64 + 192 x 64 (fc1) + 64 x 96 (fc2) = 28800.
  EXPECT_EQ(ls.num_parameters(), 28800);
  EXPECT_EQ(ls.tp_replicated_parameters(), 128);
  EXPECT_EQ(c.num_parameters(100), 128064);
}

TEST(GptConfig, HeadChunkRows) {
  // N 65536 x 50304 x 2 bytes = 6.1 GiB -> 7 chunks of ceil(65536 / 7) = 9363 -> 9408 rows.
  EXPECT_EQ(head_chunk_rows(65536, 50304, 2), 9408);
  EXPECT_EQ(head_chunk_rows(1024, 50304, 2), 1024);
  EXPECT_EQ(head_chunk_rows(100, 50304, 2, 0), 100);  // 0: one chunk
}

TEST(Options, NamesRoundTrip) {
  for (Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full})
    EXPECT_EQ(recompute_from_string(to_string(r)), r);
  EXPECT_THROW(recompute_from_string("partial"), Error);
  for (Position p : {Position::LearnedAbsolute, Position::Rope, Position::None})
    EXPECT_EQ(position_from_string(to_string(p)), p);
  for (Norm n : {Norm::LayerNorm, Norm::RMSNorm}) EXPECT_EQ(norm_from_string(to_string(n)), n);
  EXPECT_FALSE(norm_from_string("layernorm").has_value());
}

TEST(GptConfig, FieldListNamesEachFieldOnce) {
  GptConfig c;
  std::set<std::string> names;
  int core = 0, options = 0, moe = 0, flags = 0;
  visit_fields(c, [&](const char* name, auto&, FieldKind kind) {
    EXPECT_TRUE(names.insert(name).second) << name;
    (kind == FieldKind::kCore ? core : kind == FieldKind::kOption ? options : kind == FieldKind::kMoe ? moe : flags)++;
  });
  EXPECT_EQ(core, 12);
  EXPECT_EQ(options, 9);
  EXPECT_EQ(moe, 10);
  EXPECT_EQ(flags, 1);  // qk_layernorm
  EXPECT_TRUE(names.count("qk_layernorm"));
  EXPECT_TRUE(names.count("untie_embeddings_and_output_weights"));
}

}  // namespace
}  // namespace tripod::config
