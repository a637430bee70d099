// Implementation of plan/gpu_specs.h. Figures from NVIDIA's datasheets
// (dense, i.e. without structured sparsity; SXM parts unless named).
#include "plan/gpu_specs.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

namespace tripod::plan {

const std::vector<GpuSpec>& gpu_specs() {
  // Longer keys first where one contains another (h100pcie before h100).
  static const std::vector<GpuSpec> specs = {
      {"NVIDIA H200", "h200", 140, 989, 4.8},
      {"NVIDIA H100 PCIe", "h100pcie", 80, 756, 2.0},
      {"NVIDIA H100 NVL", "h100nvl", 94, 835, 3.9},
      {"NVIDIA H100 SXM", "h100", 80, 989, 3.35},
      {"NVIDIA A100 80GB", "a10080gb", 80, 312, 2.039},
      {"NVIDIA A100 40GB", "a100", 40, 312, 1.555},
      {"NVIDIA L40S", "l40s", 48, 362, 0.864},
      {"NVIDIA B200", "b200", 180, 2250, 8.0},
  };
  return specs;
}

std::optional<GpuSpec> find_gpu_spec(const std::string& name) {
  std::string s;
  for (char c : name)
    if (std::isalnum(static_cast<unsigned char>(c))) s += char(std::tolower(static_cast<unsigned char>(c)));
  // "NVIDIA H100 80GB HBM3" is the SXM part; "... PCIe" and "NVL" are named.
  for (const auto& g : gpu_specs())
    if (s == g.key || s.find(g.key) != std::string::npos) return g;
  return std::nullopt;
}

OpProfile scale_op_profile(const OpProfile& p, const GpuSpec& from, const GpuSpec& to) {
  const double flops = from.bf16_tflops / to.bf16_tflops, bytes = from.hbm_tbs / to.hbm_tbs;
  auto factor = [&](OpClass c) { return c == OpClass::kMemory ? bytes : flops; };
  OpProfile s = p;
  s.device = to.name;
  for (auto& [key, sec] : s.measured)
    if (auto op = parse_op_key(key)) sec *= factor(op->op_class());
  for (auto& [cls, f] : s.fits) {
    f.rate /= factor(cls);
    f.overhead_s *= factor(cls);
  }
  s.origin = fmt::format("{}; scaled to the {} by datasheet figures: FLOP-bound ops x {:.2f} (dense bf16 "
                         "{:.0f} / {:.0f} TFLOP/s), memory-bound ops x {:.2f} (HBM {:.2f} / {:.2f} TB/s)",
                         p.origin, to.name, flops, from.bf16_tflops, to.bf16_tflops, bytes, from.hbm_tbs, to.hbm_tbs);
  return s;
}

}  // namespace tripod::plan
