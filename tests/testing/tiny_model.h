// The tiny models the model, distributed and checkpoint tests build: a
// finalized GptConfig of a given shape, in the GPT-2 flavour (learned
// positions, LayerNorm, GELU, biases, the output layer tied to the word
// embedding) or the Llama flavour (RoPE, RMSNorm, grouped-query attention,
// SwiGLU, an untied output layer, no biases).
//
//   const auto cfg = testing::tiny_gpt({.num_layers = 4, .hidden_size = 16});
//   const auto llama = testing::tiny_llama({.num_attention_heads = 4}, 2, 48);
#pragma once

#include <cstdint>

#include "config/gpt_config.h"

namespace tripod::testing {

struct TinyShape {
  int64_t num_layers = 2;
  int64_t hidden_size = 16;
  int64_t num_attention_heads = 2;
  int64_t seq_length = 8;
  int64_t vocab_size = 40;
};

// The shape on GptConfig's defaults (the GPT-2 flavour), not finalized.
inline config::GptConfig shaped(const TinyShape& s) {
  config::GptConfig c;
  c.num_layers = s.num_layers;
  c.hidden_size = s.hidden_size;
  c.num_attention_heads = s.num_attention_heads;
  c.seq_length = s.seq_length;
  c.vocab_size = s.vocab_size;
  return c;
}

inline config::GptConfig tiny_gpt(const TinyShape& s = {}) {
  config::GptConfig c = shaped(s);
  c.finalize();
  return c;
}

// query_groups: --num-query-groups; ffn_hidden_size: the SwiGLU width F
// (fc1 is [gate | up], 2F rows).
inline config::GptConfig tiny_llama(const TinyShape& s, int64_t query_groups, int64_t ffn_hidden_size) {
  config::GptConfig c = shaped(s);
  c.group_query_attention = true;
  c.num_query_groups = query_groups;
  c.swiglu = true;
  c.ffn_hidden_size = ffn_hidden_size;
  c.position_embedding_type = config::GptConfig::Position::Rope;
  c.normalization = config::GptConfig::Norm::RMSNorm;
  c.untie_embeddings_and_output_weights = true;
  c.add_bias_linear = false;
  c.finalize();
  return c;
}

}  // namespace tripod::testing
