// Implementation of config/fp8_config.h.
#include "config/fp8_config.h"

#include <fmt/format.h>

#include "base/error.h"

namespace tripod::config {

bool Fp8Config::uses_fp8(int64_t layer, int64_t num_layers) const {
  if (!enabled()) return false;
  if (!first_last_layers_bf16) return true;
  return layer >= num_layers_at_start_in_bf16 && layer < num_layers - num_layers_at_end_in_bf16;
}

void Fp8Config::finalize(int64_t num_layers) const {
  check_dot_product_attention(1);
  check_high_precision_wgrad();
  if (!enabled()) return;
  TRIPOD_CHECK_HINT(margin >= 0, "use --fp8-margin 0 (the default) or more", "--fp8-margin is {}", margin);
  TRIPOD_CHECK_HINT(amax_history_len >= 1, "use --fp8-amax-history-len 1 (the default) or more",
                    "--fp8-amax-history-len is {}", amax_history_len);
  check_param_gather_recipe();
  if (first_last_layers_bf16) {
    TRIPOD_CHECK_HINT(num_layers_at_start_in_bf16 >= 0 && num_layers_at_end_in_bf16 >= 0,
                      "use non-negative --num-layers-at-start-in-bf16 / --num-layers-at-end-in-bf16",
                      "--num-layers-at-start-in-bf16 {} / --num-layers-at-end-in-bf16 {}",
                      num_layers_at_start_in_bf16, num_layers_at_end_in_bf16);
    TRIPOD_CHECK_HINT(num_layers_at_start_in_bf16 + num_layers_at_end_in_bf16 <= num_layers,
                      "lower --num-layers-at-start-in-bf16 / --num-layers-at-end-in-bf16",
                      "--num-layers-at-start-in-bf16 {} + --num-layers-at-end-in-bf16 {} exceed --num-layers {}",
                      num_layers_at_start_in_bf16, num_layers_at_end_in_bf16, num_layers);
  }
}

void Fp8Config::check_param_gather_recipe() const {
  // The gathered codes are cast with the weight's one delayed or current
  // scale; block scaling would gather 128x128 tiles with their scales.
  TRIPOD_CHECK_HINT(!(param_gather && blockwise()), "drop --fp8-param-gather with --fp8-recipe blockwise",
                    "--fp8-param-gather with --fp8-recipe blockwise is not supported yet: the all-gather sends "
                    "codes of one per-tensor scale, not 128x128 tiles with their scales");
}

void Fp8Config::check_high_precision_wgrad() const {
  TRIPOD_CHECK_HINT(enabled() || !high_precision_wgrad, "add --fp8-format hybrid (or e4m3), or drop --no-fp8-wgrad",
                    "--no-fp8-wgrad needs FP8 layers (--fp8-format): without them every weight gradient is "
                    "already in the compute dtype");
}

void Fp8Config::check_dot_product_attention(int cp) const {
  if (!dot_product_attention) return;
  TRIPOD_CHECK_HINT(enabled(), "add --fp8-format hybrid (or e4m3), or drop --fp8-dot-product-attention",
                    "--fp8-dot-product-attention needs FP8 layers (--fp8-format): it runs their attention in FP8");
  // cuDNN's FP8 attention quantizes P, O, dP and dQKV inside the kernel, with
  // scales it is given: current scaling would need each tensor's amax before
  // the kernel that produces it runs.
  TRIPOD_CHECK_HINT(delayed(), "use --fp8-recipe delayed (the default) with --fp8-dot-product-attention",
                    "--fp8-dot-product-attention with --fp8-recipe {} is not supported yet: cuDNN's FP8 "
                    "attention takes one scale per tensor and needs those of S, O, dP and dQKV before it runs",
                    to_string(recipe));
  TRIPOD_CHECK_HINT(cp <= 1, "drop --fp8-dot-product-attention with --context-parallel-size > 1",
                    "--fp8-dot-product-attention with context parallelism (--context-parallel-size {}) is not "
                    "supported yet: the ring, all-gather and all-to-all attention exchange K/V blocks in the "
                    "compute dtype",
                    cp);
}

std::string Fp8Config::unused_settings() const {
  if (enabled()) return "";
  const Fp8Config d;
  std::string s;
  auto add = [&](const std::string& flag) { s += (s.empty() ? "" : ", ") + flag; };
  if (recipe != d.recipe) add("--fp8-recipe " + to_string(recipe));
  if (margin != d.margin) add(fmt::format("--fp8-margin {}", margin));
  if (amax_history_len != d.amax_history_len) add(fmt::format("--fp8-amax-history-len {}", amax_history_len));
  if (amax_compute_algo != d.amax_compute_algo) add("--fp8-amax-compute-algo " + to_string(amax_compute_algo));
  if (first_last_layers_bf16) add("--first-last-layers-bf16");
  return s;
}

std::string Fp8Config::describe() const {
  if (!enabled()) return "off";
  std::string s = fmt::format("{}, {}", to_string(format), to_string(recipe));
  if (delayed())
    s += fmt::format(" (history {}, {}, margin {})", amax_history_len, to_string(amax_compute_algo), margin);
  else if (blockwise())
    s += " (1x128 activation and gradient blocks, 128x128 weight tiles, power-of-two scales)";
  else
    s += fmt::format(" (margin {})", margin);
  if (first_last_layers_bf16)
    s += fmt::format("; first {} and last {} layers in high precision", num_layers_at_start_in_bf16,
                     num_layers_at_end_in_bf16);
  if (param_gather) s += "; the FP8 weights all-gathered as FP8 codes (--fp8-param-gather)";
  if (dot_product_attention) s += "; the FP8 layers' attention in FP8 (--fp8-dot-product-attention)";
  if (high_precision_wgrad) s += "; weight gradients in the compute dtype (--no-fp8-wgrad)";
  return s;
}

std::optional<Fp8Format> fp8_format_from_string(const std::string& s) {
  if (s == "e4m3") return Fp8Format::E4M3;
  if (s == "hybrid") return Fp8Format::Hybrid;
  return std::nullopt;
}

std::optional<Fp8Recipe> fp8_recipe_from_string(const std::string& s) {
  if (s == "delayed") return Fp8Recipe::Delayed;
  if (s == "tensorwise") return Fp8Recipe::Tensorwise;
  if (s == "blockwise") return Fp8Recipe::Blockwise;
  return std::nullopt;
}

std::optional<AmaxComputeAlgo> amax_compute_algo_from_string(const std::string& s) {
  if (s == "most_recent") return AmaxComputeAlgo::MostRecent;
  if (s == "max") return AmaxComputeAlgo::Max;
  return std::nullopt;
}

std::string to_string(Fp8Format f) {
  return f == Fp8Format::E4M3 ? "e4m3" : (f == Fp8Format::Hybrid ? "hybrid" : "none");
}
std::string to_string(Fp8Recipe r) {
  return r == Fp8Recipe::Delayed ? "delayed" : (r == Fp8Recipe::Tensorwise ? "tensorwise" : "blockwise");
}
std::string to_string(AmaxComputeAlgo a) { return a == AmaxComputeAlgo::Max ? "max" : "most_recent"; }

}  // namespace tripod::config
