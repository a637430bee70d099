// Implementation of cli/model_flags.h.
#include "cli/model_flags.h"

#include "base/error.h"

namespace tripod::cli {

void ModelFlags::add_to(CLI::App& app, config::GptConfig& m) {
  app.add_option("--position-embedding-type", position_, "learned_absolute (GPT-2) | rope | none")
      ->capture_default_str();
  app.add_flag("--use-rotary-position-embeddings", rotary_alias_, "= --position-embedding-type rope");
  app.add_flag("--no-position-embedding", no_position_, "no learned position embedding (with rope, or none)");
  app.add_option("--rotary-base", m.rotary_base, "RoPE base theta (Llama 2: 10000, Llama 3: 500000)")
      ->capture_default_str();
  app.add_option("--rotary-percent", m.rotary_percent, "share of each head's dims that RoPE rotates")
      ->capture_default_str();
  app.add_option("--normalization", normalization_, "LayerNorm (GPT-2) | RMSNorm")->capture_default_str();
  app.add_option("--norm-epsilon", m.layernorm_epsilon, "epsilon of LayerNorm / RMSNorm")->capture_default_str();
  app.add_flag("--swiglu", m.swiglu, "SwiGLU MLP: fc1 = [gate | up] (2 x --ffn-hidden-size rows)");
  app.add_flag("--group-query-attention", m.group_query_attention, "grouped-query attention (--num-query-groups)");
  app.add_option("--num-query-groups", m.num_query_groups, "K/V heads with --group-query-attention");
  app.add_flag("--untie-embeddings-and-output-weights", m.untie_embeddings_and_output_weights,
               "an output layer of its own instead of the word embedding");
  app.add_flag("--disable-bias-linear", disable_bias_, "no biases in the linear layers (Llama)");
  app.add_option("--kv-channels", m.kv_channels, "head size; only --hidden-size / --num-attention-heads");
}

void ModelFlags::apply(const CLI::App& app, config::GptConfig& m) const {
  using P = config::GptConfig::Position;
  std::string pos = position_;
  if (rotary_alias_) {
    TRIPOD_CHECK_HINT(app.count("--position-embedding-type") == 0 || pos == "rope", "pass one of them",
                      "--use-rotary-position-embeddings contradicts --position-embedding-type {}", pos);
    pos = "rope";
  }
  if (pos == "learned_absolute") m.position_embedding_type = P::LearnedAbsolute;
  else if (pos == "rope") m.position_embedding_type = P::Rope;
  else if (pos == "none") m.position_embedding_type = P::None;
  else
    throw Error(fmt::format("--position-embedding-type {} is not one of learned_absolute, rope, none", pos),
                "Llama-family models use --position-embedding-type rope");
  // Megatron: --no-position-embedding drops the learned table; with the
  // default type that leaves no position information at all.
  if (no_position_ && m.position_embedding_type == P::LearnedAbsolute) m.position_embedding_type = P::None;
  if (normalization_ == "LayerNorm") m.normalization = config::GptConfig::Norm::LayerNorm;
  else if (normalization_ == "RMSNorm") m.normalization = config::GptConfig::Norm::RMSNorm;
  else
    throw Error(fmt::format("--normalization {} is not one of LayerNorm, RMSNorm", normalization_),
                "Llama-family models use --normalization RMSNorm");
  // --num-query-groups without --group-query-attention is ignored, as in Megatron.
  if (disable_bias_) m.add_bias_linear = false;
}

}  // namespace tripod::cli
