// FP8 training options (Megatron's TransformerConfig fp8 fields and
// Transformer Engine's recipe), with Megatron's spellings:
//   --fp8-format e4m3 | hybrid    hybrid: E4M3 forward operands (activations,
//                                 weights), E5M2 gradients; e4m3: E4M3 for all
//   --fp8-recipe delayed | tensorwise | blockwise
//       delayed     Transformer Engine's DelayedScaling: each tensor is
//                   quantized with a scale from the amax history of earlier
//                   iterations; the history rolls once per iteration
//       tensorwise  current (per-tensor) scaling: the amax of the tensor
//                   itself, then its scale, before every cast
//       blockwise   current block scaling (DeepSeek-V3's, Transformer
//                   Engine's Float8BlockScaling): activations and gradients
//                   with a scale per 1x128 block, weights per 128x128 tile,
//                   each the power of two from the block's own amax; no
//                   history, no margin, no amax reduction
//   --fp8-margin M                scale = fp8_max / amax / 2^M
//   --fp8-amax-history-len H      delayed: iterations of amax kept
//   --fp8-amax-compute-algo most_recent | max   delayed: which amax of the history
//   --first-last-layers-bf16 with --num-layers-at-start-in-bf16 / --num-layers-at-end-in-bf16
//                                 those layers keep high-precision GEMMs
//   --fp8-dot-product-attention   the FP8 layers' attention core on FP8 Q, K, V
//                                 (Transformer Engine's fp8_dpa; delayed scaling only)
//   --no-fp8-wgrad                the FP8 layers' weight-gradient GEMMs in the
//                                 compute dtype, from the unquantized input and
//                                 output gradient (forward and dgrad stay FP8)
// Which layers quantize is GptConfig::layer_spec(i).fp8 (uses_fp8 below):
// the one rule for the model and the planner. Not part of a checkpoint's
// model metadata (a checkpoint does not depend on the GEMM precision).
// docs/fp8.md is the guide.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tripod::config {

enum class Fp8Format { None, E4M3, Hybrid };
enum class Fp8Recipe { Delayed, Tensorwise, Blockwise };
enum class AmaxComputeAlgo { MostRecent, Max };

struct Fp8Config {
  Fp8Format format = Fp8Format::None;  // None: no FP8 anywhere
  Fp8Recipe recipe = Fp8Recipe::Delayed;
  int margin = 0;
  int amax_history_len = 1;
  AmaxComputeAlgo amax_compute_algo = AmaxComputeAlgo::MostRecent;
  bool first_last_layers_bf16 = false;
  int64_t num_layers_at_start_in_bf16 = 1;
  int64_t num_layers_at_end_in_bf16 = 1;
  // --fp8-param-gather: the distributed optimizer gathers the FP8 layers'
  // linear weights as FP8 codes (distributed/fp8_param_gather.h).
  bool param_gather = false;
  // --fp8-dot-product-attention: the attention core of every FP8 layer runs
  // on FP8 Q, K, V, the compute dtype in and out (model/fp8_meta.h
  // Fp8Attention); LayerSpec::fp8_attention says where.
  bool dot_product_attention = false;
  // --no-fp8-wgrad (Megatron's fp8_wgrad = False; Transformer Engine's
  // override_linear_precision wgrad): dW = dy^T x in the compute dtype. The
  // layers keep their compute-dtype inputs instead of the FP8 transposes.
  bool high_precision_wgrad = false;

  bool enabled() const { return format != Fp8Format::None; }
  bool delayed() const { return recipe == Fp8Recipe::Delayed; }
  bool blockwise() const { return recipe == Fp8Recipe::Blockwise; }
  bool fp8_wgrad() const { return enabled() && !high_precision_wgrad; }
  // Whether layer `layer` of `num_layers` runs its four linears in FP8.
  bool uses_fp8(int64_t layer, int64_t num_layers) const;
  // Checks the values (errors name the flag and the fix).
  void finalize(int64_t num_layers) const;
  // --fp8-dot-product-attention's refusals (without --fp8-format, under
  // tensorwise or blockwise scaling, with context parallelism of `cp` ranks).
  void check_dot_product_attention(int cp) const;
  // --no-fp8-wgrad's refusal without --fp8-format.
  void check_high_precision_wgrad() const;
  // --fp8-param-gather's refusal under blockwise scaling.
  void check_param_gather_recipe() const;
  std::string describe() const;  // "hybrid, delayed (history 1, most_recent, margin 0)"
  // Without --fp8-format: the FP8 settings given other than their defaults,
  // which then change nothing ("--fp8-recipe blockwise, --fp8-margin 2";
  // "" when none or when FP8 is on). Megatron ignores them alike.
  std::string unused_settings() const;
};

// Megatron's spellings; nullopt for another name (the caller names the flag).
std::optional<Fp8Format> fp8_format_from_string(const std::string& s);
std::optional<Fp8Recipe> fp8_recipe_from_string(const std::string& s);
std::optional<AmaxComputeAlgo> amax_compute_algo_from_string(const std::string& s);
std::string to_string(Fp8Format f);
std::string to_string(Fp8Recipe r);
std::string to_string(AmaxComputeAlgo a);

}  // namespace tripod::config
