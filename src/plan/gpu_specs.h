// Datasheet figures of the GPUs `tripod plan --gpu NAME` knows, and the
// scaling of an op-time table measured on one GPU to another: FLOP-bound
// ops (the linears, attention) by the ratio of dense bf16 FLOP/s,
// memory-bound ops (norms, adds, the loss head, AdamW) by the ratio of HBM
// bandwidth. A first-order estimate, said so in the plan's output; a table
// measured on the GPU itself (`tripod plan --calibrate` there) replaces it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "plan/op_profile.h"

namespace tripod::plan {

struct GpuSpec {
  const char* name;        // "NVIDIA H100 SXM"
  const char* key;         // what --gpu takes: "h100"
  double memory_gib;       // as the driver reports it, GiB
  double bf16_tflops;      // dense bf16 tensor-core TFLOP/s (datasheet)
  double hbm_tbs;          // HBM bandwidth, TB/s (datasheet)
};

const std::vector<GpuSpec>& gpu_specs();
// By --gpu key or by a device name ("NVIDIA H100 80GB HBM3" -> h100):
// nullopt when unknown.
std::optional<GpuSpec> find_gpu_spec(const std::string& name);

// `from`'s op times as `to` would take them (measured and fitted times
// scaled per class); origin says how.
OpProfile scale_op_profile(const OpProfile& p, const GpuSpec& from, const GpuSpec& to);

}  // namespace tripod::plan
