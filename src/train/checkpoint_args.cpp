// Implementation of train/checkpoint_args.h.
#include "train/checkpoint_args.h"

#include <fmt/format.h>

#include <vector>

#include "base/error.h"
#include "base/log.h"

namespace tripod::train {
namespace {

struct Difference {
  std::string now;  // the run's flags and what the checkpoint holds instead
  std::string fix;  // what matches the checkpoint
};

// A boolean flag: "--swiglu" given or not; `saved_means` says what the
// checkpoint holds when the flag is absent there.
void flag_set(std::vector<Difference>* out, const char* flag, bool now, bool saved, const char* saved_without,
              const char* saved_with) {
  if (now == saved) return;
  if (now)
    out->push_back({fmt::format("{}: the checkpoint {} (trained without {})", flag, saved_without, flag),
                    fmt::format("drop {}", flag)});
  else
    out->push_back({fmt::format("no {}: the checkpoint {} (trained with {})", flag, saved_with, flag),
                    fmt::format("add {}", flag)});
}

void size(std::vector<Difference>* out, const char* flag, int64_t now, int64_t saved, const char* note = "") {
  if (now == saved) return;
  out->push_back({fmt::format("{} {}{}: the checkpoint has {}", flag, now, note, saved),
                  fmt::format("{} {}", flag, saved)});
}

}  // namespace

void check_model_args(const config::GptConfig& now, const config::GptConfig& saved, const std::string& where,
                      bool finetune) {
  std::vector<Difference> d;
  // ---- kinds first: a size that follows from a kind is named after it ----
  if (now.normalization != saved.normalization)
    d.push_back({fmt::format("--normalization {}: the checkpoint's layers use {}", to_string(now.normalization),
                             to_string(saved.normalization)),
                 fmt::format("--normalization {}", to_string(saved.normalization))});
  flag_set(&d, "--swiglu", now.swiglu, saved.swiglu, "has a GELU MLP", "has a SwiGLU MLP");
  flag_set(&d, "--qk-layernorm", now.qk_layernorm, saved.qk_layernorm, "has no query/key norms",
           "has query/key norms");
  if (now.position_embedding_type != saved.position_embedding_type)
    d.push_back({fmt::format("--position-embedding-type {}: the checkpoint uses {}",
                             to_string(now.position_embedding_type), to_string(saved.position_embedding_type)),
                 fmt::format("--position-embedding-type {}", to_string(saved.position_embedding_type))});
  flag_set(&d, "--untie-embeddings-and-output-weights", now.untie_embeddings_and_output_weights,
           saved.untie_embeddings_and_output_weights, "ties the output layer to the word embedding",
           "has an output layer of its own");
  flag_set(&d, "--disable-bias-linear", !now.add_bias_linear, !saved.add_bias_linear,
           "has biases in its linear layers", "has no biases in its linear layers");
  if (now.query_groups() != saved.query_groups()) {
    const std::string given = now.group_query_attention
                                  ? fmt::format("--group-query-attention --num-query-groups {}", now.num_query_groups)
                                  : fmt::format("no --group-query-attention ({} key/value heads, one per head)",
                                                now.query_groups());
    if (saved.group_query_attention)
      d.push_back({fmt::format("{}: the checkpoint has {} key/value heads", given, saved.query_groups()),
                   fmt::format("--group-query-attention --num-query-groups {}", saved.query_groups())});
    else
      d.push_back({fmt::format("{}: the checkpoint has {} key/value heads, one per attention head (trained "
                               "without --group-query-attention)",
                               given, saved.query_groups()),
                   "drop --group-query-attention and --num-query-groups"});
  }
  // ---- sizes ----
  size(&d, "--num-layers", now.num_layers, saved.num_layers);
  size(&d, "--hidden-size", now.hidden_size, saved.hidden_size);
  size(&d, "--num-attention-heads", now.num_attention_heads, saved.num_attention_heads);
  size(&d, "--ffn-hidden-size", now.ffn_hidden_size, saved.ffn_hidden_size,
       " (given, or the default for --hidden-size and --swiglu)");
  size(&d, "--max-position-embeddings", now.max_position_embeddings, saved.max_position_embeddings,
       " (given, or --seq-length)");
  if (now.vocab_size != saved.vocab_size)
    d.push_back({fmt::format("a vocabulary of {} tokens (the tokenizer's, or --vocab-size): the checkpoint has {}",
                             now.vocab_size, saved.vocab_size),
                 fmt::format("the tokenizer files it was trained with (a vocabulary of {}), or --vocab-size {} "
                             "without tokenizer files",
                             saved.vocab_size, saved.vocab_size)});
  // ---- what the same parameters compute ----
  std::vector<Difference> numbers;
  if (now.layernorm_epsilon != saved.layernorm_epsilon)
    numbers.push_back({fmt::format("--norm-epsilon {}: the checkpoint was trained with {}", now.layernorm_epsilon,
                                   saved.layernorm_epsilon),
                       fmt::format("--norm-epsilon {}", saved.layernorm_epsilon)});
  if (now.rope() && saved.rope()) {
    if (now.rotary_base != saved.rotary_base)
      numbers.push_back({fmt::format("--rotary-base {}: the checkpoint was trained with {}", now.rotary_base,
                                     saved.rotary_base),
                         fmt::format("--rotary-base {}", saved.rotary_base)});
    if (now.rotary_percent != saved.rotary_percent)
      numbers.push_back({fmt::format("--rotary-percent {}: the checkpoint was trained with {}", now.rotary_percent,
                                     saved.rotary_percent),
                         fmt::format("--rotary-percent {}", saved.rotary_percent)});
  }
  if (finetune) {
    for (const auto& n : numbers) log::info("--finetune from {}: {} (the new value is used)", where, n.now);
  } else {
    d.insert(d.end(), numbers.begin(), numbers.end());
  }
  if (d.empty()) return;
  std::string message = fmt::format("the model flags contradict the checkpoint {} ({} difference{}):", where,
                                    d.size(), d.size() == 1 ? "" : "s");
  std::string fix;
  for (const auto& x : d) {
    message += "\n  " + x.now;
    fix += (fix.empty() ? "" : "; ") + x.fix;
  }
  const std::string tail = numbers.empty() || finetune
                               ? ""
                               : " (--finetune accepts another --norm-epsilon or rotary setting, on purpose)";
  throw Error(message, fmt::format("use the checkpoint's model flags: {}; or --load another checkpoint{}", fix, tail));
}

}  // namespace tripod::train
