// AdamW over flat f32 buffers (master weights, gradients, and the two
// moments), with per-segment weight decay (Megatron: none for biases and
// LayerNorm). The caller owns the values and gradients; the optimizer owns
// the moments. With the distributed optimizer the buffers are this rank's
// shard of the flat parameter buffer.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/ops.h"

namespace tripod::optim {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // Megatron's defaults
  double weight_decay = 0.01;
};

// A contiguous range [offset, offset + numel) of the flat buffers.
struct Segment {
  int64_t offset = 0, numel = 0;
  bool weight_decay = true;
  bool decoupled_lr = false;  // the embedding / output layer: --decoupled-lr's schedule when given
};
// Merges adjacent segments with the same flags (fewer kernel launches).
std::vector<Segment> merge_segments(std::vector<Segment> segments);

class AdamW {
 public:
  AdamW(backend::Backend& be, int64_t numel, const AdamWConfig& config);
  // One step on values (numel) with grads (numel) * grad_scale at this lr
  // (decoupled_lr >= 0: at that lr for the segments marked decoupled_lr,
  // Megatron's --decoupled-lr). compute (optional, numel, bf16/f16): the
  // mixed-precision compute copy aligned with values; each segment's
  // updated values are written into it in the same pass (as cast() would),
  // so no separate cast of them is needed.
  void step(Tensor& values, const Tensor& grads, const std::vector<Segment>& segments, double lr,
            float grad_scale, Tensor* compute = nullptr, double decoupled_lr = -1);
  int64_t steps() const { return steps_; }
  void set_steps(int64_t s) { steps_ = s; }
  Tensor& exp_avg() { return m_; }
  Tensor& exp_avg_sq() { return v_; }
  const AdamWConfig& config() const { return config_; }

 private:
  backend::Backend& be_;
  AdamWConfig config_;
  Tensor m_, v_;  // (numel) f32
  int64_t steps_ = 0;
};

// Global-norm clipping coefficient (Megatron's clip_grad_norm_fp32):
// max_norm / (norm + 1e-6) when that is < 1, else 1. max_norm <= 0: no clipping.
float clip_coefficient(double total_norm, double max_norm);

}  // namespace tripod::optim
