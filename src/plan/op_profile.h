// Per-op times of one device: what `tripod plan` adds up for a step's compute
// instead of a fixed --assumed-mfu.
//
// A micro-batch of tripod's model is a fixed list of backend ops (the same
// calls model/transformer_layer.cpp and model/gpt_model.cpp make): per layer
// 4 linear forwards and backwards, the attention forward and backward, 2
// LayerNorm forwards and backwards and the residual add; the loss head's
// linear, LayerNorm and one-pass cross-entropy on the last stage; the
// embedding on the first; AdamW per step. micro_batch_ops() lists them with
// their shapes for a layout; an OpProfile gives each one's seconds:
//   - measured: `tripod plan --calibrate` runs every listed op on this
//     machine's device (the real kernels, 1 warm-up + 3 timed runs on a GPU)
//     and caches the seconds per op and shape (calibration_cache_path(),
//     keyed by device name and tripod version: another version's cache is
//     ignored, with a note);
//   - shipped: fits measured on known GPUs (shipped_profile(): the H200 of
//     bench/RESULTS.md) for shapes nobody measured;
//   - fitted: each op class (linear, attention forward, attention backward,
//     memory-bound, FP8 linear, block-scaled FP8 linear) as seconds = work / rate + overhead, a least-squares
//     line through the measured points of that class (work: FLOPs for
//     linears and attention, bytes moved for the memory-bound ops).
//
// Usage:
//   auto ops = plan::micro_batch_ops(model, layout);      // one micro-batch
//   double s = profile.seconds_of(ops);                    // measured or fitted
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "plan/memory_model.h"

namespace tripod::plan {

enum class OpKind {
  kLinearFwd,     // rows, in, out, gelu: matmul_forward (+ bias), matmul_forward_gelu when gelu = 1
  kLinearBwd,     // rows, in, out, gelu: matmul_backward (d input + d weight + d bias), _dgelu when gelu = 1
  kAttentionFwd,  // batch, seq, heads, head size: causal flash attention forward
  kAttentionBwd,
  kNormFwd,       // rows, hidden: (fused residual +) LayerNorm forward
  kNormBwd,       // rows, hidden: LayerNorm backward (rewrites its output)
  kAdd,           // rows, hidden: residual add
  kCrossEntropy,  // rows, vocab: one-pass loss + d logits
  kAdamW,         // parameters: fused AdamW + compute-copy cast
  kGradNorm,      // parameters: sum of squares of the f32 gradients, then their zeroing
  // --fp8-format (the FP8 layers' linears, model/fp8_meta.h Fp8Linear):
  kFp8LinearFwd,  // rows, in, out, gelu: x's E4M3 cast + transpose, the FP8 GEMM (+ GELU, unfused)
  kFp8LinearBwd,  // rows, in, out, gelu: dy's E5M2 cast + transpose, dgrad and wgrad FP8 GEMMs (+ GELU backward)
  kFp8WeightCast, // out, in: a weight's E4M3 cast + transpose, once per step
  // --fp8-recipe blockwise (the same linears on block-scaled operands,
  // backend/ops.h fp8_block_cast / fp8_block_matmul; same dimensions):
  kFp8BlockLinearFwd,   // x cast in 1x128 row blocks + its transpose in 128-row column blocks, the GEMM (+ GELU)
  kFp8BlockLinearBwd,   // dy cast alike, dgrad (x 128x128 weight tiles) and wgrad (1x128 x 1x128) (+ GELU backward)
  kFp8BlockWeightCast,  // out, in: a weight's cast in 128x128 tiles + transpose, once per step
  // --fp8-dot-product-attention (the FP8 layers' attention core on E4M3 Q, K,
  // V codes, backend/ops.h attention_fp8_forward / _backward):
  kFp8AttentionFwd,  // batch, seq, heads, head size: as kAttentionFwd
  kFp8AttentionBwd,
};
enum class OpClass {
  kLinear,
  kAttentionFwd,
  kAttentionBwd,
  kMemory,
  kFp8Linear,
  kFp8BlockLinear,
  kFp8AttentionFwd,
  kFp8AttentionBwd
};

// What an FP8 linear's time is taken as when only bf16 linears were timed
// (a profile from before FP8, or the shipped one): the bf16 fit at this
// many times the rate (measured 1.44-1.89 on one H200 at GPT-2 1.5B and
// Llama 3 8B layer shapes, bench/RESULTS.md); Machine::fp8_gemm_speedup's
// default for the FLOP-based model.
inline constexpr double kFp8GemmSpeedup = 1.6;
// The same for a block-scaled FP8 linear (--fp8-recipe blockwise): the
// bf16 fit at this many times the rate. On one H100 (docs/fp8.md, bench/
// RESULTS.md "FP8 block scaling") cuBLASLt's block-scaled GEMMs ran at
// 1265-1329 TFLOP/s forward and dgrad against 1373-1423 per-tensor, the
// 1x128 x 1x128 wgrad at about 1000 against 1300, and the cast with its
// transpose took 67 us against 51 at 8192 x 4096 bf16: over a linear's
// three GEMMs about 1.15x the per-tensor time, so 1.6 / 1.15 ~ 1.4.
// Machine::fp8_block_gemm_speedup's default.
inline constexpr double kFp8BlockGemmSpeedup = 1.4;
// What cuDNN's FP8 attention (--fp8-dot-product-attention) is taken as when
// only the bf16 attention was timed: the bf16 fit at these many times the
// rate. Measured with cuDNN 9.19 on one H100 at the Llama 3 8B layer shape
// (bench/RESULTS.md, "FP8 attention"), the casts around the kernels
// included: forward 1.28-1.34x, backward 1.00-1.02x.
inline constexpr double kFp8AttentionFwdSpeedup = 1.3;
inline constexpr double kFp8AttentionBwdSpeedup = 1.0;

struct OpShape {
  OpKind kind = OpKind::kAdd;
  int64_t d[4] = {0, 0, 0, 0};
  int act_bytes = 2;  // compute dtype size (2: bf16/fp16, 4: fp32)

  std::string key() const;  // "linear_fwd 8192x768x2304 bf16"
  OpClass op_class() const;
  double work() const;      // FLOPs (linear, attention) or bytes moved (memory-bound)
  bool operator<(const OpShape& o) const { return key() < o.key(); }
};

// The shape a key() string names; nullopt when it is malformed.
std::optional<OpShape> parse_op_key(const std::string& key);

struct OpCount {
  OpShape op;
  double count = 1;  // calls per micro-batch (or per step for AdamW)
};

// One micro-batch, forward + backward (+ the recomputed forward), on the
// busiest pipeline stage (the last: it holds the loss head) at one TP rank.
// Under --fp8-format the FP8 layers' linears are the kFp8Linear* ops (the
// share of FP8 layers among the stage's, --first-last-layers-bf16 kept out),
// the kFp8BlockLinear* ops under --fp8-recipe blockwise. Under --no-fp8-wgrad
// an FP8 linear's backward is its FP8 dgrad, taken as the FP8 forward kind
// of shape (rows, out -> in), and its bf16 wgrad, half a kLinearBwd of its
// shape (an approximation: op_profile.cpp says where it is off). Under
// --fp8-dot-product-attention the FP8 layers' attention cores are the
// kFp8Attention* ops.
std::vector<OpCount> micro_batch_ops(const GptConfig& m, const Layout& l);
// Once per step: the optimizer over this rank's parameters (its shard under
// the distributed optimizer); under --fp8-format the FP8 weights' casts
// (kFp8WeightCast, or kFp8BlockWeightCast under --fp8-recipe blockwise).
std::vector<OpCount> step_ops(const GptConfig& m, const Layout& l);
// The share of the busiest (last) stage's layers whose linears run in FP8
// (0 without --fp8-format or under --first-last-layers-bf16 for a stage of
// only those layers).
double fp8_layer_share(const GptConfig& m, const Layout& l);

struct ClassFit {
  double rate = 0;        // work per second (0: no fit)
  double overhead_s = 0;  // fixed seconds per call
  int points = 0;         // measured ops it was fitted on
};

struct OpProfile {
  static constexpr int kFormat = 1;
  std::string device;          // "NVIDIA H200", "cpu"
  std::string tripod_version;  // of the binary that measured it
  std::string origin;          // "measured on this machine (cache ...)", "shipped: ..."
  std::map<std::string, double> measured;  // OpShape::key() -> seconds per call
  std::map<OpClass, ClassFit> fits;

  bool has(const OpShape& op) const { return measured.count(op.key()) > 0; }
  // Measured seconds when this shape was measured, else the class fit (an
  // FP8 linear without an FP8 fit: the linear fit at kFp8GemmSpeedup; a
  // block-scaled one without its fit: at kFp8BlockGemmSpeedup); 0 (and *ok
  // false) when neither exists.
  double seconds(const OpShape& op, bool* ok = nullptr) const;
  double seconds_of(const std::vector<OpCount>& ops, bool* ok = nullptr) const;
  // Least-squares fits per class from `measured` (keys parsed back to shapes).
  void refit();
  // How many of `ops` have a measured time (the rest come from the fits).
  int measured_count(const std::vector<OpCount>& ops) const;

  std::string to_json() const;
  // Throws Error naming `source` on malformed input.
  static OpProfile from_json(const std::string& text, const std::string& source);
};

// The version string calibration caches are keyed by ("0.1.0+g1a2b3c4").
std::string tripod_version();

// Where `--calibrate` keeps its measurements for `device`:
// $TRIPOD_CACHE_DIR/plan (default ~/.cache/tripod/plan)/<device slug>.json.
std::string calibration_cache_path(const std::string& device);

// The cache for `device` when it exists and was written by this tripod
// version and format; otherwise nullopt and *why says why (missing, another
// version, malformed) for the output's notes.
std::optional<OpProfile> load_calibration(const std::string& path, const std::string& device, std::string* why);
void save_calibration(const std::string& path, const OpProfile& p);  // write to a temporary, then rename

// Fits measured on known GPUs ("h200"; matched case-insensitively inside a
// device name such as "NVIDIA H200"), nullopt for others.
std::optional<OpProfile> shipped_profile(const std::string& gpu);

}  // namespace tripod::plan
