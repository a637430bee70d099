// The Llama-family model flags with Megatron-LM's names (--position-embedding-type,
// --normalization, --swiglu, --group-query-attention, ...), shared by the
// commands that build a model. add_to() registers them; apply() turns the
// parsed strings into config::GptConfig fields (docs/llama.md).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "config/gpt_config.h"

namespace tripod::cli {

class ModelFlags {
 public:
  void add_to(CLI::App& app, config::GptConfig& m);
  // After parsing: fills the config from the string flags and the aliases.
  // Errors name the flag and the accepted values.
  void apply(const CLI::App& app, config::GptConfig& m) const;

 private:
  std::string position_ = "learned_absolute", normalization_ = "LayerNorm";
  bool rotary_alias_ = false, no_position_ = false, disable_bias_ = false;
};

}  // namespace tripod::cli
