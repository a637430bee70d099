// GPT model configuration (Megatron argument names) and the shape letters
// used in comments across tripod:
//   B  micro-batch size          T  sequence length
//   C  hidden size               F  ffn hidden size (4C by default)
//   V  vocab size                Vp padded vocab (--make-vocab-size-divisible-by x tp)
//   L  layers                    NH heads, HS = C / NH head size
//   G  query groups (K/V heads; NH without --group-query-attention), k = NH / G
//   N  rows = B * T              _tp suffix: this tensor-parallel rank's shard
//                                (C_tp = C / tp, F_tp = F / tp, V_tp = Vp / tp, NH_tp = NH / tp,
//                                 G_tp = G / tp)
//
// The defaults are GPT-2 (LayerNorm, learned absolute positions, GELU MLP,
// biases, output layer tied to the word embedding). The Llama family sets,
// with Megatron's flags: RMSNorm, RoPE, SwiGLU, grouped-query attention,
// untied output layer, no biases (docs/llama.md). One model code path.
#pragma once

#include <cstdint>
#include <string>

#include "config/fp8_config.h"
#include "config/layer_spec.h"
#include "config/moe_config.h"
#include "config/options.h"

namespace tripod::config {

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
  using Position = config::Position;
  using Norm = config::Norm;
  Position position_embedding_type = Position::LearnedAbsolute;  // --position-embedding-type
  float rotary_base = 10000.f;   // --rotary-base
  float rotary_percent = 1.f;    // --rotary-percent: rotated share of each head's dims
  Norm normalization = Norm::LayerNorm;  // --normalization
  bool swiglu = false;           // --swiglu: fc1 is [gate | up] (2F rows), act = silu(gate) * up
  bool group_query_attention = false;  // --group-query-attention
  int64_t num_query_groups = 0;  // --num-query-groups G (0 -> NH)
  bool untie_embeddings_and_output_weights = false;
  bool add_bias_linear = true;   // --disable-bias-linear sets false
  // --qk-layernorm (Megatron-core, Qwen3): a norm of --normalization's
  // kind over each query and key head, HS wide, its weight (and bias)
  // shared by the heads; after qkv, before RoPE.
  bool qk_layernorm = false;
  int64_t kv_channels = 0;       // --kv-channels: 0 or C / NH (other head sizes are rejected)
  // --fp8-format and its recipe (config/fp8_config.h): which layers' linears
  // quantize is layer_spec(i).fp8. Not recorded in checkpoints (not in
  // visit_fields): the GEMM precision does not change the parameters.
  Fp8Config fp8;
  // Mixture of experts (config/moe_config.h): which layers are MoE and
  // their shape is layer_spec(i). Recorded in checkpoints (kMoe fields).
  MoeConfig moe;

  // Fills the derived sizes (ffn, max positions) and checks every rule that
  // does not depend on the layout. Errors name the flag and the fix.
  void finalize();
  // Megatron's padding: smallest multiple of divisible_by * tp >= vocab_size.
  int64_t padded_vocab_size(int tp_size) const;
  int64_t head_size() const { return hidden_size / num_attention_heads; }
  // K/V heads G (NH without grouped-query attention).
  int64_t query_groups() const { return group_query_attention ? num_query_groups : num_attention_heads; }
  bool rmsnorm() const { return normalization == Norm::RMSNorm; }
  bool rope() const { return position_embedding_type == Position::Rope; }
  bool learned_positions() const { return position_embedding_type == Position::LearnedAbsolute; }
  // Rotated dims per head (even): HS * --rotary-percent.
  int64_t rotary_dim() const;
  // Width of qkv's output: (NH + 2G) HS.
  int64_t qkv_width() const { return (num_attention_heads + 2 * query_groups()) * head_size(); }
  // Width of fc1's output: 2F with SwiGLU, else F.
  int64_t fc1_width() const { return swiglu ? 2 * ffn_hidden_size : ffn_hidden_size; }
  // True for the GPT-2 defaults of every Llama option.
  bool is_gpt2() const;
  // The shape and kinds of layer `layer` (0..L-1): the same for every layer
  // but its GEMM precision (FP8 unless --first-last-layers-bf16 keeps it in
  // high precision) and its MLP (MoE on the layers --moe-layer-freq names).
  LayerSpec layer_spec(int64_t layer) const;

  // Parameter count at padded vocab Vp (a tied output layer counted once).
  int64_t num_parameters(int64_t padded_vocab) const;
  // Training FLOPs per token: 6 N + 6 L T C (N the parameters at the
  // *unpadded* vocab, less an untied input embedding, which does no matmul;
  // the attention term counting the full T x T: llm.c's and PaLM's
  // convention). GQA and SwiGLU enter through N.
  double flops_per_token() const;
  std::string describe() const;

 private:
  std::string describe_dense() const;
};

// The fields a checkpoint's metadata records and reads back
// (ckpt/sharded_checkpoint.cpp config_to_json / config_from_json), in one
// list: a new model option is a member above plus one line here. kCore
// fields are always written and must be present; kOption fields are written
// only when the model is not GPT-2 (GPT-2 checkpoints keep their metadata
// bytes) and read with the member's default when absent (older
// checkpoints). kFlag fields (bools) are written only when true, so the
// checkpoints of models without them keep their bytes. kv_channels is not
// recorded: only C / NH is accepted.
enum class FieldKind { kCore, kOption, kMoe, kFlag };
template <class Config, class Visitor>  // Config: GptConfig or const GptConfig
void visit_fields(Config& c, Visitor&& v) {
  v("num_layers", c.num_layers, FieldKind::kCore);
  v("hidden_size", c.hidden_size, FieldKind::kCore);
  v("num_attention_heads", c.num_attention_heads, FieldKind::kCore);
  v("ffn_hidden_size", c.ffn_hidden_size, FieldKind::kCore);
  v("seq_length", c.seq_length, FieldKind::kCore);
  v("max_position_embeddings", c.max_position_embeddings, FieldKind::kCore);
  v("vocab_size", c.vocab_size, FieldKind::kCore);
  v("make_vocab_size_divisible_by", c.make_vocab_size_divisible_by, FieldKind::kCore);
  v("init_method_std", c.init_method_std, FieldKind::kCore);
  v("layernorm_epsilon", c.layernorm_epsilon, FieldKind::kCore);
  v("hidden_dropout", c.hidden_dropout, FieldKind::kCore);
  v("attention_dropout", c.attention_dropout, FieldKind::kCore);
  v("position_embedding_type", c.position_embedding_type, FieldKind::kOption);
  v("rotary_base", c.rotary_base, FieldKind::kOption);
  v("rotary_percent", c.rotary_percent, FieldKind::kOption);
  v("normalization", c.normalization, FieldKind::kOption);
  v("swiglu", c.swiglu, FieldKind::kOption);
  v("group_query_attention", c.group_query_attention, FieldKind::kOption);
  v("num_query_groups", c.num_query_groups, FieldKind::kOption);
  v("untie_embeddings_and_output_weights", c.untie_embeddings_and_output_weights, FieldKind::kOption);
  v("add_bias_linear", c.add_bias_linear, FieldKind::kOption);
  v("qk_layernorm", c.qk_layernorm, FieldKind::kFlag);
  v("num_experts", c.moe.num_experts, FieldKind::kMoe);
  v("moe_ffn_hidden_size", c.moe.ffn_hidden_size, FieldKind::kMoe);
  v("moe_router_topk", c.moe.router_topk, FieldKind::kMoe);
  v("moe_router_score_function", c.moe.router_score_function, FieldKind::kMoe);
  v("moe_router_pre_softmax", c.moe.router_pre_softmax, FieldKind::kMoe);
  v("moe_router_topk_scaling_factor", c.moe.router_topk_scaling_factor, FieldKind::kMoe);
  v("moe_shared_expert_intermediate_size", c.moe.shared_expert_intermediate_size, FieldKind::kMoe);
  v("moe_shared_expert_gate", c.moe.shared_expert_gate, FieldKind::kMoe);
  v("moe_router_enable_expert_bias", c.moe.router_enable_expert_bias, FieldKind::kMoe);
  v("moe_layer_freq", c.moe.layer_freq, FieldKind::kMoe);
}

// Rows of one loss-head chunk for N rows of V_tp logits of elem_bytes each:
// N when the (N, V_tp) logits fit in max_bytes (or max_bytes is 0), else N
// split into the fewest equal chunks that fit, rounded up to a multiple of
// 64 rows (the last chunk takes the rest). The model's loss head
// (model/gpt_model.h) and the planner's workspace bytes both use it.
inline constexpr int64_t kLossChunkBytes = int64_t(1) << 30;  // the default chunk, 1 GiB
int64_t head_chunk_rows(int64_t N, int64_t V_tp, int64_t elem_bytes, int64_t max_bytes = kLossChunkBytes);

}  // namespace tripod::config
