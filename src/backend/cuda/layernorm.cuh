// LayerNorm launchers (CUDA version of backend/cpu's layernorm_forward /
// layernorm_backward; contracts in backend/ops.h). inp/out/dout/dinp share
// the activation dtype `dt`; weight/bias are `dt` or f32 (weight_dt: fp32
// LayerNorm params under bf16/fp16); mean/rstd are f32; dweight/dbias are
// f32 or `dt` (grad_dt).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tensor/dtype.h"

namespace tripod::backend::cuda {

void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* weight,
                       const void* bias, DType weight_dt, float eps, int64_t N, int64_t C, DType dt,
                       cudaStream_t stream);

// residual(N, C) = a + b (rounded to dt); out = layernorm(residual) with
// mean/rstd, as add then layernorm_forward. residual may alias a or b.
void fused_residual_layernorm_forward(void* residual, void* out, float* mean, float* rstd, const void* a,
                                      const void* b, const void* weight, const void* bias, DType weight_dt,
                                      float eps, int64_t N, int64_t C, DType dt, cudaStream_t stream);

// Blocks of the backward; scratch needs 2 * layernorm_backward_blocks(N) * C floats.
int layernorm_backward_blocks(int64_t N);
// C up to ~7000 (per-warp shared accumulators of 2*C floats, 4 warps).
// out (N, C) and bias (weight_dt), when given: the forward's output again.
void layernorm_backward(void* dinp, void* dweight, void* dbias, DType grad_dt, const void* dout,
                        const void* inp, const void* weight, DType weight_dt, const float* mean,
                        const float* rstd, int64_t N, int64_t C, DType dt, float* scratch,
                        cudaStream_t stream, void* out = nullptr, const void* bias = nullptr);

}  // namespace tripod::backend::cuda
