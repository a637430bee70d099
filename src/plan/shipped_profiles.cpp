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

// NVIDIA H200 SXM, CUDA 13.0, cuDNN 9.14, bf16 (bench/RESULTS.md, 2026-12-03,
// per-op table of the cuDNN-attention lease: linears 510-770 TFLOP/s, LM head
// 671-755, cuDNN attention forward 221-278 and atomic-dQ backward 205-370,
// memory-bound ops 1.5-5 TB/s).
constexpr const char* kH200 = R"json({
 "format": 1, "device": "NVIDIA H200", "tripod_version": "shipped",
 "measured_seconds": {},
 "fits": {
  "linear": {"rate_per_s": 6.5e14, "overhead_s": 5e-6, "points": 0},
  "attention_fwd": {"rate_per_s": 2.5e14, "overhead_s": 5e-6, "points": 0},
  "attention_bwd": {"rate_per_s": 2.3e14, "overhead_s": 5e-6, "points": 0},
  "memory": {"rate_per_s": 2.5e12, "overhead_s": 3e-6, "points": 0}
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
