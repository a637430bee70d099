// Fused AdamW launcher: one pass over f32 master weights, gradients and both
// moments (CUDA version of backend/cpu's adamw_update).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tripod::backend::cuda {

struct AdamWArgs {
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
  float bias_correction1, bias_correction2;  // 1 - beta^step
};

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWArgs& args, cudaStream_t stream);

}  // namespace tripod::backend::cuda
