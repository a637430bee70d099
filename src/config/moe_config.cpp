// Implementation of config/moe_config.h.
#include "config/moe_config.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>

#include "base/error.h"

namespace tripod::config {
namespace {

constexpr const char* kFreqHint =
    "pass --moe-layer-freq N (every N-th layer from layer 0), a list such as [1,0,1,0] with one entry per layer, or "
    "Megatron's expression form such as ([1]*3+[0]*1)*2";

// Megatron's --moe-layer-freq expressions:
//   expr := term ('+' term)*     term := atom ('*' int)*
//   atom := '[' int (',' int)* ']' | '(' expr ')'
class FreqParser {
 public:
  explicit FreqParser(const std::string& s) : s_(s) {}
  std::vector<int> parse() {
    std::vector<int> v = expr();
    skip();
    TRIPOD_CHECK_HINT(at_ == s_.size(), kFreqHint, "--moe-layer-freq '{}': unexpected '{}' at {}", s_, s_.substr(at_),
                      at_);
    return v;
  }

 private:
  void skip() {
    while (at_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[at_]))) ++at_;
  }
  bool eat(char c) {
    skip();
    if (at_ < s_.size() && s_[at_] == c) return ++at_, true;
    return false;
  }
  int64_t integer() {
    skip();
    const size_t start = at_;
    while (at_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[at_]))) ++at_;
    TRIPOD_CHECK_HINT(at_ > start && at_ - start < 7, kFreqHint, "--moe-layer-freq '{}': expected a number at {}", s_,
                      start);
    return std::stoll(s_.substr(start, at_ - start));
  }
  std::vector<int> expr() {
    std::vector<int> v = term();
    while (eat('+')) {
      std::vector<int> t = term();
      v.insert(v.end(), t.begin(), t.end());
    }
    return v;
  }
  std::vector<int> term() {
    std::vector<int> v = atom();
    while (eat('*')) {
      const int64_t n = integer();
      TRIPOD_CHECK_HINT(static_cast<int64_t>(v.size()) * n <= 100000, kFreqHint, "--moe-layer-freq '{}' is too long",
                        s_);
      std::vector<int> r;
      for (int64_t i = 0; i < n; ++i) r.insert(r.end(), v.begin(), v.end());
      v = std::move(r);
    }
    return v;
  }
  std::vector<int> atom() {
    if (eat('(')) {
      std::vector<int> v = expr();
      TRIPOD_CHECK_HINT(eat(')'), kFreqHint, "--moe-layer-freq '{}': a '(' is not closed", s_);
      return v;
    }
    TRIPOD_CHECK_HINT(eat('['), kFreqHint, "--moe-layer-freq '{}': expected '[' or '(' at {}", s_, at_);
    std::vector<int> v;
    do {
      const int64_t x = integer();
      TRIPOD_CHECK_HINT(x == 0 || x == 1, kFreqHint, "--moe-layer-freq '{}': entries are 0 (dense) or 1 (MoE), got {}",
                        s_, x);
      v.push_back(static_cast<int>(x));
    } while (eat(','));
    TRIPOD_CHECK_HINT(eat(']'), kFreqHint, "--moe-layer-freq '{}': a '[' is not closed", s_);
    return v;
  }

  const std::string& s_;
  size_t at_ = 0;
};

}  // namespace

std::vector<int> moe_layer_pattern(const std::string& freq, int64_t num_layers) {
  bool digits = !freq.empty();
  for (char c : freq) digits = digits && std::isdigit(static_cast<unsigned char>(c));
  if (digits) {
    TRIPOD_CHECK_HINT(freq.size() < 7, kFreqHint, "--moe-layer-freq {} is too large", freq);
    const int64_t n = std::stoll(freq);
    TRIPOD_CHECK_HINT(n >= 1, kFreqHint, "--moe-layer-freq {} must be >= 1", freq);
    std::vector<int> v(static_cast<size_t>(num_layers));
    for (int64_t i = 0; i < num_layers; ++i) v[static_cast<size_t>(i)] = i % n == 0 ? 1 : 0;
    return v;
  }
  std::vector<int> v = FreqParser(freq).parse();
  TRIPOD_CHECK_HINT(static_cast<int64_t>(v.size()) == num_layers, kFreqHint,
                    "--moe-layer-freq '{}' has {} entries but --num-layers is {}", freq, v.size(), num_layers);
  return v;
}

int64_t MoeConfig::capacity(int64_t tokens) const {
  return static_cast<int64_t>(std::ceil(static_cast<double>(tokens * router_topk) /
                                        static_cast<double>(num_experts) * expert_capacity_factor));
}

void MoeConfig::finalize(int64_t num_layers, int64_t ffn) {
  if (!enabled()) {
    TRIPOD_CHECK_HINT(num_experts == 0, "pass --num-experts E with E >= 1, or leave it out for a dense model",
                      "--num-experts is {}", num_experts);
    TRIPOD_CHECK_HINT(shared_expert_intermediate_size == 0 && !router_enable_expert_bias,
                      "pass --num-experts E, or drop the --moe-* flags for a dense model",
                      "MoE options are given without --num-experts");
    return;
  }
  if (ffn_hidden_size == 0) ffn_hidden_size = ffn;
  TRIPOD_CHECK_HINT(ffn_hidden_size > 0, "pass a positive --moe-ffn-hidden-size", "--moe-ffn-hidden-size is {}",
                    ffn_hidden_size);
  TRIPOD_CHECK_HINT(router_topk >= 1 && router_topk <= num_experts,
                    "choose --moe-router-topk between 1 and --num-experts",
                    "--moe-router-topk {} with --num-experts {}", router_topk, num_experts);
  TRIPOD_CHECK_HINT(router_score_function == "softmax" || router_score_function == "sigmoid",
                    "use --moe-router-score-function softmax (Mixtral, Qwen2-MoE) or sigmoid (DeepSeek-V3)",
                    "--moe-router-score-function {} is not supported", router_score_function);
  TRIPOD_CHECK_HINT(router_dtype.empty() || router_dtype == "fp32",
                    "use --moe-router-dtype fp32, or leave it out (the score function is in fp32 either way)",
                    "--moe-router-dtype {} is not supported", router_dtype);
  TRIPOD_CHECK_HINT(router_topk_scaling_factor >= 0.f, "use a positive --moe-router-topk-scaling-factor",
                    "--moe-router-topk-scaling-factor is {}", router_topk_scaling_factor);
  TRIPOD_CHECK_HINT(shared_expert_intermediate_size >= 0, "use a positive --moe-shared-expert-intermediate-size",
                    "--moe-shared-expert-intermediate-size is {}", shared_expert_intermediate_size);
  TRIPOD_CHECK_HINT(!shared_expert_gate || shared_expert_intermediate_size > 0,
                    "pass --moe-shared-expert-intermediate-size with --moe-shared-expert-gate",
                    "--moe-shared-expert-gate without a shared expert");
  const std::string& lb = router_load_balancing_type;
  TRIPOD_CHECK_HINT(lb == "aux_loss" || lb == "seq_aux_loss" || lb == "none",
                    "use --moe-router-load-balancing-type aux_loss, seq_aux_loss or none",
                    "--moe-router-load-balancing-type {} is not supported", lb);
  TRIPOD_CHECK_HINT(aux_loss_coeff >= 0.f && z_loss_coeff >= 0.f, "use non-negative loss coefficients",
                    "--moe-aux-loss-coeff {} / --moe-z-loss-coeff {}", aux_loss_coeff, z_loss_coeff);
  TRIPOD_CHECK_HINT(!router_enable_expert_bias || sigmoid(),
                    "use --moe-router-score-function sigmoid with --moe-router-enable-expert-bias (DeepSeek-V3)",
                    "--moe-router-enable-expert-bias needs the sigmoid score function");
  TRIPOD_CHECK_HINT(router_bias_update_rate >= 0.f, "use a non-negative --moe-router-bias-update-rate",
                    "--moe-router-bias-update-rate is {}", router_bias_update_rate);
  TRIPOD_CHECK_HINT(token_drop_policy == "probs" || token_drop_policy == "position",
                    "use --moe-token-drop-policy probs or position", "--moe-token-drop-policy {} is not supported",
                    token_drop_policy);
  TRIPOD_CHECK_HINT(token_dispatcher_type == "alltoall" || token_dispatcher_type == "allgather",
                    "use --moe-token-dispatcher-type alltoall or allgather",
                    "--moe-token-dispatcher-type {} is not supported", token_dispatcher_type);
  (void)moe_layer_pattern(layer_freq, num_layers);  // throws on a bad pattern
}

bool MoeConfig::is_moe_layer(int64_t layer, int64_t num_layers) const {
  if (!enabled()) return false;
  return moe_layer_pattern(layer_freq, num_layers).at(static_cast<size_t>(layer)) == 1;
}

std::string MoeConfig::describe() const {
  if (!enabled()) return "off";
  std::string s = fmt::format("{} experts, top-{} {}{}, expert ffn {}", num_experts, router_topk,
                              router_score_function, router_pre_softmax ? " (pre-softmax)" : "", ffn_hidden_size);
  if (shared_expert_intermediate_size > 0)
    s += fmt::format(", shared expert {}{}", shared_expert_intermediate_size, shared_expert_gate ? " (gated)" : "");
  if (balancing_coeff() > 0) s += fmt::format(", {} {}", router_load_balancing_type, aux_loss_coeff);
  if (z_loss_coeff > 0) s += fmt::format(", z-loss {}", z_loss_coeff);
  if (router_enable_expert_bias) s += fmt::format(", expert bias (rate {})", router_bias_update_rate);
  if (!dropless()) s += fmt::format(", capacity factor {} ({})", expert_capacity_factor, token_drop_policy);
  if (layer_freq != "1") s += fmt::format(", layers {}", layer_freq);
  if (grouped_gemm) s += ", grouped expert GEMMs";
  return s;
}

}  // namespace tripod::config
