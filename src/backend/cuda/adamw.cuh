// Fused AdamW launchers: one pass over f32 master weights, gradients and both
// moments (CUDA version of backend/cpu's adamw_update), optionally writing
// the bf16/f16 compute copy of the updated weights in the same pass.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tensor/dtype.h"

namespace tripod::backend::cuda {

struct AdamWArgs {
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
  float bias_correction1, bias_correction2;  // 1 - beta^step
};

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWArgs& args, cudaStream_t stream);
// As adamw_update, and compute[i] = the updated param[i] rounded to nearest
// even in compute_dt (bf16 or f16), bit for bit what cast() writes.
void adamw_update_cast(float* param, const float* grad, float* m, float* v, void* compute,
                       DType compute_dt, int64_t n, const AdamWArgs& args, cudaStream_t stream);

}  // namespace tripod::backend::cuda
