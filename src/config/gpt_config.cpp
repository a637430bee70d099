// Implementation of config/gpt_config.h.
#include "config/gpt_config.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/error.h"

namespace tripod::config {

void GptConfig::finalize() {
  // Megatron's default MLP width: 4C, or with SwiGLU 2/3 of it rounded down
  // to a multiple of 64 (the same parameter count with three matrices).
  if (ffn_hidden_size == 0) ffn_hidden_size = swiglu ? (4 * hidden_size * 2 / 3) / 64 * 64 : 4 * hidden_size;
  if (!group_query_attention) num_query_groups = 0;
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
  TRIPOD_CHECK_HINT(kv_channels == 0 || kv_channels == hidden_size / num_attention_heads,
                    "drop --kv-channels (tripod's head size is --hidden-size / --num-attention-heads)",
                    "--kv-channels {} differs from --hidden-size {} / --num-attention-heads {} = {}: other head "
                    "sizes are not supported",
                    kv_channels, hidden_size, num_attention_heads, hidden_size / num_attention_heads);
  if (group_query_attention) {
    TRIPOD_CHECK_HINT(num_query_groups > 0, "pass --num-query-groups G with --group-query-attention",
                      "--group-query-attention needs --num-query-groups (got {})", num_query_groups);
    TRIPOD_CHECK_HINT(num_attention_heads % num_query_groups == 0,
                      "choose --num-query-groups that divides --num-attention-heads (e.g. 32 heads, 8 groups)",
                      "--num-attention-heads {} is not divisible by --num-query-groups {}", num_attention_heads,
                      num_query_groups);
  }
  if (rope()) {
    TRIPOD_CHECK_HINT(rotary_percent > 0.f && rotary_percent <= 1.f, "use --rotary-percent in (0, 1]",
                      "--rotary-percent is {}", rotary_percent);
    TRIPOD_CHECK_HINT(rotary_base > 0.f, "use a positive --rotary-base (Llama: 10000 or 500000)",
                      "--rotary-base is {}", rotary_base);
    TRIPOD_CHECK_HINT(rotary_dim() >= 2, "raise --rotary-percent",
                      "--rotary-percent {} of head size {} rotates no dimension pair", rotary_percent,
                      head_size());
  }
  TRIPOD_CHECK_HINT(layernorm_epsilon > 0.f, "use a positive --norm-epsilon (e.g. 1e-5)",
                    "--norm-epsilon is {}", layernorm_epsilon);
  TRIPOD_CHECK_HINT(attention_dropout == 0.f, "use --attention-dropout 0 (the default); --hidden-dropout is supported",
                    "--attention-dropout {} is not supported yet: the fused attention kernels keep no probability matrix",
                    attention_dropout);
  fp8.finalize(num_layers);
  moe.finalize(num_layers, ffn_hidden_size);
}

int64_t GptConfig::padded_vocab_size(int tp_size) const {
  const int64_t multiple = make_vocab_size_divisible_by * tp_size;
  return (vocab_size + multiple - 1) / multiple * multiple;
}

int64_t GptConfig::rotary_dim() const {
  const int64_t r = static_cast<int64_t>(static_cast<double>(head_size()) * rotary_percent);
  return r / 2 * 2;
}

bool GptConfig::is_gpt2() const {
  return position_embedding_type == Position::LearnedAbsolute && normalization == Norm::LayerNorm && !swiglu &&
         !group_query_attention && !untie_embeddings_and_output_weights && add_bias_linear && !qk_layernorm;
}

LayerSpec GptConfig::layer_spec(int64_t layer) const {
  LayerSpec s;
  s.hidden_size = hidden_size;
  s.norm = normalization;
  s.attention = AttentionKind::Local;
  s.num_attention_heads = num_attention_heads;
  s.query_groups = query_groups();
  s.mlp = MlpKind::Dense;
  s.swiglu = swiglu;
  s.ffn_hidden_size = ffn_hidden_size;
  s.bias = add_bias_linear;
  s.qk_layernorm = qk_layernorm;
  s.fp8 = fp8.uses_fp8(layer, num_layers);
  s.fp8_attention = s.fp8 && fp8.dot_product_attention;
  if (moe.is_moe_layer(layer, num_layers)) {
    s.mlp = MlpKind::Moe;
    s.num_experts = moe.num_experts;
    s.moe_ffn_hidden_size = moe.ffn_hidden_size;
    s.router_topk = moe.router_topk;
    s.shared_expert_size = moe.shared_expert_intermediate_size;
    s.shared_expert_gate = moe.shared_expert_gate;
    s.expert_bias = moe.router_enable_expert_bias;
  }
  return s;
}

int64_t LayerSpec::expert_parameters(int64_t f) const {
  const int64_t f1 = swiglu ? 2 * f : f, b = bias ? 1 : 0;
  return f1 * hidden_size + b * f1 + hidden_size * f + b * hidden_size;
}

int64_t LayerSpec::tp_sharded_parameters() const {
  const int64_t C = hidden_size, F = ffn_hidden_size, Q = qkv_width(), F1 = fc1_width(), b = bias ? 1 : 0;
  const int64_t attention = Q * C + b * Q  // qkv (column-parallel)
                            + C * C;       // proj weight (row-parallel)
  if (moe())  // the shared expert's fc1 column- and fc2 row-parallel (biases as a dense MLP's); the
              // routed experts are not split (--expert-tensor-parallel-size 1)
    return attention + (shared_expert_size > 0 ? expert_parameters(shared_expert_size) - b * C : 0);
  return attention + F1 * C + b * F1  // fc1 (column-parallel)
         + C * F;                     // fc2 weight (row-parallel)
}

int64_t LayerSpec::tp_replicated_parameters() const {
  const int64_t C = hidden_size, b = bias ? 1 : 0;
  const int64_t qk = qk_layernorm ? 2 * (norm == Norm::RMSNorm ? 1 : 2) * head_size() : 0;  // q, k norms
  const int64_t dense = 2 * norm_parameters() + b * 2 * C + qk;  // input, pre-MLP norms; proj, fc2 biases
  if (!moe()) return dense;
  const int64_t shared_fc2_bias = b * C * (shared_expert_size > 0 ? 1 : 0);
  return dense - b * C + shared_fc2_bias + num_experts * expert_parameters(moe_ffn_hidden_size)  // whole experts
         + num_experts * C  // the router
         + (expert_bias ? num_experts : 0) + (shared_expert_gate ? C : 0);
}

int64_t LayerSpec::active_parameters() const {
  if (!moe()) return num_parameters();
  return num_parameters() - (num_experts - router_topk) * expert_parameters(moe_ffn_hidden_size);
}

int64_t GptConfig::num_parameters(int64_t Vp) const {
  const int64_t C = hidden_size, norm = layer_spec(0).norm_parameters();  // the final norm
  int64_t layers = 0;
  for (int64_t i = 0; i < num_layers; ++i) layers += layer_spec(i).num_parameters();
  const int64_t positions = learned_positions() ? max_position_embeddings * C : 0;
  const int64_t output = untie_embeddings_and_output_weights ? Vp * C : 0;
  return Vp * C + positions + layers + norm + output;
}

int64_t head_chunk_rows(int64_t N, int64_t V_tp, int64_t elem_bytes, int64_t max_bytes) {
  const int64_t row_bytes = V_tp * elem_bytes;
  if (max_bytes <= 0 || N * row_bytes <= max_bytes) return N;
  const int64_t fit = std::max<int64_t>(1, max_bytes / row_bytes);  // rows that fit
  const int64_t chunks = (N + fit - 1) / fit;
  const int64_t rows = ((N + chunks - 1) / chunks + 63) / 64 * 64;
  return std::min(rows, N);
}

double GptConfig::flops_per_token() const {
  const int64_t untied_input = untie_embeddings_and_output_weights ? vocab_size * hidden_size : 0;
  int64_t inactive = 0;  // MoE: the experts a token does not visit do no matmul for it
  for (int64_t i = 0; i < num_layers; ++i) inactive += layer_spec(i).num_parameters() - layer_spec(i).active_parameters();
  return 6.0 * static_cast<double>(num_parameters(vocab_size) - untied_input - inactive) +
         6.0 * static_cast<double>(num_layers * seq_length * hidden_size);
}

std::string GptConfig::describe() const {
  if (moe.enabled()) return describe_dense() + "; MoE: " + moe.describe();
  return describe_dense();
}

std::string GptConfig::describe_dense() const {
  if (!is_gpt2())
    return fmt::format("GPT ({}{}{}{}{}{}): {} layers, hidden {}, {} heads, {} query groups, ffn {}, seq {}, vocab {} "
                       "({} params at vocab {})",
                       rmsnorm() ? "RMSNorm" : "LayerNorm",
                       rope() ? ", RoPE" : (learned_positions() ? ", learned positions" : ", no positions"),
                       swiglu ? ", SwiGLU" : ", GELU", group_query_attention ? ", GQA" : "",
                       untie_embeddings_and_output_weights ? ", untied" : "", add_bias_linear ? "" : ", no bias",
                       num_layers, hidden_size, num_attention_heads, query_groups(), ffn_hidden_size, seq_length,
                       vocab_size, num_parameters(vocab_size), vocab_size);
  return fmt::format("GPT: {} layers, hidden {}, {} heads, ffn {}, seq {}, vocab {} ({} params at vocab {})",
                     num_layers, hidden_size, num_attention_heads, ffn_hidden_size, seq_length,
                     vocab_size, num_parameters(vocab_size), vocab_size);
}

}  // namespace tripod::config
