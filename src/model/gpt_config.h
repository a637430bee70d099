// GPT model configuration (Megatron argument names) and the shape letters
// used in comments across tripod:
//   B  micro-batch size          T  sequence length
//   C  hidden size               F  ffn hidden size (4C by default)
//   V  vocab size                Vp padded vocab (--make-vocab-size-divisible-by x tp)
//   L  layers                    NH heads, HS = C / NH head size
//   N  rows = B * T              _tp suffix: this tensor-parallel rank's shard
//                                (C_tp = C / tp, F_tp = F / tp, V_tp = Vp / tp, NH_tp = NH / tp)
#pragma once

#include <cstdint>
#include <string>

namespace tripod::model {

struct GptConfig {
  int64_t num_layers = 2;
  int64_t hidden_size = 64;
  int64_t num_attention_heads = 4;
  int64_t ffn_hidden_size = 0;          // 0 -> 4 * hidden_size
  int64_t seq_length = 32;
  int64_t max_position_embeddings = 0;  // 0 -> seq_length
  int64_t vocab_size = 0;               // tokenizer's vocab
  int64_t make_vocab_size_divisible_by = 128;
  float init_method_std = 0.02f;
  float layernorm_epsilon = 1e-5f;
  float hidden_dropout = 0.f;
  float attention_dropout = 0.f;

  // Fills the derived sizes (ffn, max positions) and checks every rule that
  // does not depend on the layout. Errors name the flag and the fix.
  void finalize();
  // Megatron's padding: smallest multiple of divisible_by * tp >= vocab_size.
  int64_t padded_vocab_size(int tp_size) const;
  int64_t head_size() const { return hidden_size / num_attention_heads; }

  // Parameter count at padded vocab Vp (tied output layer counted once).
  int64_t num_parameters(int64_t padded_vocab) const;
  // Training FLOPs per token: 6 N + 6 L T C (N at the *unpadded* vocab, the
  // attention term counting the full T x T: llm.c's and PaLM's convention).
  double flops_per_token() const;
  std::string describe() const;
};

}  // namespace tripod::model
