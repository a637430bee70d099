// RMSNorm launchers (CUDA version of backend/cpu's rmsnorm_forward /
// rmsnorm_backward; contracts in backend/ops.h). inp/out/dout/dinp share the
// activation dtype `dt`; weight is `dt` or f32 (weight_dt); rstd is f32;
// dweight is f32 or `dt` (grad_dt).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tensor/dtype.h"

namespace tripod::backend::cuda {

void rmsnorm_forward(void* out, float* rstd, const void* inp, const void* weight, DType weight_dt, float eps,
                     int64_t N, int64_t C, DType dt, cudaStream_t stream);

// residual(N, C) = a + b (rounded to dt); out = rmsnorm(residual) with rstd,
// as add then rmsnorm_forward. residual may alias a or b.
void fused_residual_rmsnorm_forward(void* residual, void* out, float* rstd, const void* a, const void* b,
                                    const void* weight, DType weight_dt, float eps, int64_t N, int64_t C,
                                    DType dt, cudaStream_t stream);

// Blocks of the backward; scratch needs rmsnorm_backward_blocks(N) * C floats.
int rmsnorm_backward_blocks(int64_t N);
// dinp += ; dweight += . C up to ~12000 (per-warp shared accumulators of C floats, 4 warps).
void rmsnorm_backward(void* dinp, void* dweight, DType grad_dt, const void* dout, const void* inp,
                      const void* weight, DType weight_dt, const float* rstd, int64_t N, int64_t C, DType dt,
                      float* scratch, cudaStream_t stream);

}  // namespace tripod::backend::cuda
