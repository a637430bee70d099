// Implementation of model/gpt_config.h.
#include "model/gpt_config.h"

#include <fmt/format.h>

#include "base/error.h"

namespace tripod::model {

void GptConfig::finalize() {
  if (ffn_hidden_size == 0) ffn_hidden_size = 4 * hidden_size;
  if (max_position_embeddings == 0) max_position_embeddings = seq_length;
  TRIPOD_CHECK_HINT(num_layers > 0, "pass --num-layers N with N >= 1", "--num-layers is {}", num_layers);
  TRIPOD_CHECK_HINT(hidden_size > 0, "pass --hidden-size", "--hidden-size is {}", hidden_size);
  TRIPOD_CHECK_HINT(num_attention_heads > 0, "pass --num-attention-heads", "--num-attention-heads is {}",
                    num_attention_heads);
  TRIPOD_CHECK_HINT(hidden_size % num_attention_heads == 0,
                    "choose --num-attention-heads that divides --hidden-size (e.g. hidden 768 with 12 heads)",
                    "--hidden-size {} is not divisible by --num-attention-heads {}", hidden_size,
                    num_attention_heads);
  TRIPOD_CHECK_HINT(seq_length > 0, "pass --seq-length", "--seq-length is {}", seq_length);
  TRIPOD_CHECK_HINT(max_position_embeddings >= seq_length,
                    "set --max-position-embeddings >= --seq-length",
                    "--max-position-embeddings {} is smaller than --seq-length {}",
                    max_position_embeddings, seq_length);
  TRIPOD_CHECK_HINT(vocab_size > 0, "pass --vocab-size N (mock data) or a tokenizer's vocab",
                    "the vocabulary size is unknown or zero");
  TRIPOD_CHECK_HINT(make_vocab_size_divisible_by > 0, "use a positive --make-vocab-size-divisible-by",
                    "--make-vocab-size-divisible-by is {}", make_vocab_size_divisible_by);
  TRIPOD_CHECK_HINT(hidden_dropout >= 0.f && hidden_dropout < 1.f, "use a value in [0, 1)",
                    "--hidden-dropout is {}", hidden_dropout);
  TRIPOD_CHECK_HINT(attention_dropout == 0.f, "use --attention-dropout 0 (the default); --hidden-dropout is supported",
                    "--attention-dropout {} is not supported yet: the fused attention kernels keep no probability matrix",
                    attention_dropout);
}

int64_t GptConfig::padded_vocab_size(int tp_size) const {
  const int64_t multiple = make_vocab_size_divisible_by * tp_size;
  return (vocab_size + multiple - 1) / multiple * multiple;
}

int64_t GptConfig::num_parameters(int64_t Vp) const {
  const int64_t C = hidden_size, F = ffn_hidden_size;
  const int64_t per_layer = 2 * C            // input layernorm
                            + 3 * C * C + 3 * C  // qkv
                            + C * C + C          // proj
                            + 2 * C              // pre-mlp layernorm
                            + F * C + F          // fc1
                            + C * F + C;         // fc2
  return Vp * C + max_position_embeddings * C + num_layers * per_layer + 2 * C;
}

double GptConfig::flops_per_token() const {
  return 6.0 * static_cast<double>(num_parameters(vocab_size)) +
         6.0 * static_cast<double>(num_layers * seq_length * hidden_size);
}

std::string GptConfig::describe() const {
  return fmt::format("GPT: {} layers, hidden {}, {} heads, ffn {}, seq {}, vocab {} ({} params at vocab {})",
                     num_layers, hidden_size, num_attention_heads, ffn_hidden_size, seq_length,
                     vocab_size, num_parameters(vocab_size), vocab_size);
}

}  // namespace tripod::model
