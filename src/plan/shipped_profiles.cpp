// Op times shipped for GPUs measured by the project (plan/op_profile.h),
// used by `tripod plan` when this machine has no calibration of its own.
// Each entry is the fits of a `tripod plan --calibrate` run on that GPU
// (bench/RESULTS.md names the run); shapes outside the measured ones use
// the class fits.
#include <algorithm>
#include <cctype>

#include "plan/op_profile.h"

namespace tripod::plan {
namespace {

// NVIDIA H200 SXM, CUDA 13.0, cuDNN 9.14, bf16: the cache file written by
// `tripod plan --calibrate` in scripts/gpu_plan_check.sh on 2026-12-03
// (bench/RESULTS.md, "tripod plan against tripod's own runs"), rounded to 4
// digits: the per-shape times of the GPT-2 124M / 350M / 1.5B shapes, and the
// class fits (linears 675 TFLOP/s, cuDNN attention 336 / 252, memory-bound
// ops 4.0 TB/s) for every other shape.
constexpr const char* kH200 = R"json({
 "format": 1, "device": "NVIDIA H200", "tripod_version": "shipped",
 "fits": {
  "attention_bwd": {"rate_per_s": 2.525e+14, "overhead_s": 4.359e-05, "points": 6},
  "attention_fwd": {"rate_per_s": 3.364e+14, "overhead_s": 1.753e-05, "points": 6},
  "linear": {"rate_per_s": 6.746e+14, "overhead_s": 6.476e-06, "points": 58},
  "memory": {"rate_per_s": 4.007e+12, "overhead_s": 5.421e-05, "points": 27}
 },
 "measured_seconds": {
  "adamw 124475904 16bit": 0.0009545,
  "adamw 1557686400 16bit": 0.01181,
  "adamw 354871296 16bit": 0.00269,
  "add 16384x1024 16bit": 2.971e-05,
  "add 16384x1600 16bit": 4.238e-05,
  "add 32768x1024 16bit": 5.27e-05,
  "add 32768x768 16bit": 4.204e-05,
  "add 65536x768 16bit": 7.581e-05,
  "add 8192x1600 16bit": 2.288e-05,
  "attention_bwd 16x1024x16x64 16bit": 0.0003844,
  "attention_bwd 16x1024x25x64 16bit": 0.0005739,
  "attention_bwd 32x1024x12x64 16bit": 0.000556,
  "attention_bwd 32x1024x16x64 16bit": 0.0007279,
  "attention_bwd 64x1024x12x64 16bit": 0.001062,
  "attention_bwd 8x1024x25x64 16bit": 0.0003067,
  "attention_fwd 16x1024x16x64 16bit": 0.0001187,
  "attention_fwd 16x1024x25x64 16bit": 0.0001771,
  "attention_fwd 32x1024x12x64 16bit": 0.0001715,
  "attention_fwd 32x1024x16x64 16bit": 0.0002226,
  "attention_fwd 64x1024x12x64 16bit": 0.0003234,
  "attention_fwd 8x1024x25x64 16bit": 9.738e-05,
  "cross_entropy 8192x50304 16bit": 0.0006396,
  "cross_entropy 9088x50304 16bit": 0.0006972,
  "cross_entropy 9408x50304 16bit": 0.000723,
  "grad_norm 124475904 16bit": 0.0002425,
  "grad_norm 1557686400 16bit": 0.002765,
  "grad_norm 354871296 16bit": 0.000649,
  "linear_bwd 16384x1024x1024 16bit": 0.0001492,
  "linear_bwd 16384x1024x3072 16bit": 0.0003071,
  "linear_bwd 16384x1024x4096 16bit": 0.0004078,
  "linear_bwd 16384x1600x1600 16bit": 0.0002633,
  "linear_bwd 16384x1600x4800 16bit": 0.0007006,
  "linear_bwd 16384x1600x6400 16bit": 0.0009309,
  "linear_bwd 16384x4096x1024x1 16bit": 0.0004131,
  "linear_bwd 16384x6400x1600x1 16bit": 0.0009344,
  "linear_bwd 32768x1024x1024 16bit": 0.0002455,
  "linear_bwd 32768x1024x3072 16bit": 0.0005747,
  "linear_bwd 32768x1024x4096 16bit": 0.000762,
  "linear_bwd 32768x3072x768x1 16bit": 0.0005614,
  "linear_bwd 32768x4096x1024x1 16bit": 0.001066,
  "linear_bwd 32768x768x2304 16bit": 0.0004111,
  "linear_bwd 32768x768x3072 16bit": 0.0004625,
  "linear_bwd 32768x768x768 16bit": 0.0001719,
  "linear_bwd 65536x3072x768x1 16bit": 0.001019,
  "linear_bwd 65536x768x2304 16bit": 0.0007436,
  "linear_bwd 65536x768x3072 16bit": 0.0008832,
  "linear_bwd 65536x768x768 16bit": 0.000274,
  "linear_bwd 8192x1024x50304 16bit": 0.002349,
  "linear_bwd 8192x1600x1600 16bit": 0.0001654,
  "linear_bwd 8192x1600x4800 16bit": 0.0004028,
  "linear_bwd 8192x1600x50304 16bit": 0.00405,
  "linear_bwd 8192x1600x6400 16bit": 0.0005178,
  "linear_bwd 8192x6400x1600x1 16bit": 0.0005054,
  "linear_bwd 8192x768x50304 16bit": 0.001921,
  "linear_bwd 9088x768x50304 16bit": 0.002309,
  "linear_bwd 9408x768x50304 16bit": 0.002355,
  "linear_fwd 16384x1024x1024 16bit": 6.578e-05,
  "linear_fwd 16384x1024x3072 16bit": 0.0001444,
  "linear_fwd 16384x1024x4096x1 16bit": 0.0002562,
  "linear_fwd 16384x1600x1600 16bit": 0.0001368,
  "linear_fwd 16384x1600x4800 16bit": 0.0003389,
  "linear_fwd 16384x1600x6400x1 16bit": 0.0005073,
  "linear_fwd 16384x4096x1024 16bit": 0.0001703,
  "linear_fwd 16384x6400x1600 16bit": 0.0004344,
  "linear_fwd 32768x1024x1024 16bit": 0.0001138,
  "linear_fwd 32768x1024x3072 16bit": 0.0002835,
  "linear_fwd 32768x1024x4096x1 16bit": 0.000477,
  "linear_fwd 32768x3072x768 16bit": 0.0002022,
  "linear_fwd 32768x4096x1024 16bit": 0.0003308,
  "linear_fwd 32768x768x2304 16bit": 0.0001812,
  "linear_fwd 32768x768x3072x1 16bit": 0.0003046,
  "linear_fwd 32768x768x768 16bit": 6.712e-05,
  "linear_fwd 65536x3072x768 16bit": 0.0003867,
  "linear_fwd 65536x768x2304 16bit": 0.0003124,
  "linear_fwd 65536x768x3072x1 16bit": 0.0005768,
  "linear_fwd 65536x768x768 16bit": 0.000119,
  "linear_fwd 8192x1024x50304 16bit": 0.001101,
  "linear_fwd 8192x1600x1600 16bit": 8.309e-05,
  "linear_fwd 8192x1600x4800 16bit": 0.0002018,
  "linear_fwd 8192x1600x50304 16bit": 0.001608,
  "linear_fwd 8192x1600x6400x1 16bit": 0.0002749,
  "linear_fwd 8192x6400x1600 16bit": 0.0002234,
  "linear_fwd 8192x768x50304 16bit": 0.0008596,
  "linear_fwd 9088x768x50304 16bit": 0.0009705,
  "linear_fwd 9408x768x50304 16bit": 0.0009816,
  "norm_bwd 16384x1024 16bit": 0.0001363,
  "norm_bwd 16384x1600 16bit": 0.0001998,
  "norm_bwd 32768x1024 16bit": 0.0002408,
  "norm_bwd 32768x768 16bit": 0.0001581,
  "norm_bwd 65536x768 16bit": 0.0002922,
  "norm_bwd 8192x1600 16bit": 0.0001074,
  "norm_fwd 16384x1024 16bit": 5.923e-05,
  "norm_fwd 16384x1600 16bit": 9.37e-05,
  "norm_fwd 32768x1024 16bit": 0.0001046,
  "norm_fwd 32768x768 16bit": 7.905e-05,
  "norm_fwd 65536x768 16bit": 0.000142,
  "norm_fwd 8192x1600 16bit": 5.485e-05
 }
})json";

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

}  // namespace

std::optional<OpProfile> shipped_profile(const std::string& gpu) {
  if (lower(gpu).find("h200") == std::string::npos) return std::nullopt;
  OpProfile p = OpProfile::from_json(kH200, "shipped H200 op times");
  p.origin = "shipped: op times measured on one NVIDIA H200 (bench/RESULTS.md); other GPUs: run "
             "`tripod plan --calibrate` on one";
  return p;
}

}  // namespace tripod::plan
