// Launchers for the elementwise ops of backend/ops.h: cast, add, scale,
// add_bias, GELU and counter-based dropout. CUDA version of the same ops in
// backend/cpu. Pointers are device pointers of dtype `dt` (f32, bf16, f16).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tensor/dtype.h"

namespace tripod::backend::cuda {

void cast(void* dst, DType dst_dt, const void* src, DType src_dt, int64_t n, cudaStream_t stream);
void add(void* out, const void* a, const void* b, int64_t n, DType dt, cudaStream_t stream);
void scale(void* t, float s, int64_t n, DType dt, cudaStream_t stream);
// out(N, OC) += bias(OC)
void add_bias(void* out, const void* bias, int64_t N, int64_t OC, DType dt, cudaStream_t stream);
void gelu_forward(void* out, const void* inp, int64_t n, DType dt, cudaStream_t stream);
void gelu_backward(void* dinp, const void* inp, const void* dout, int64_t n, DType dt,
                   cudaStream_t stream);
// keep = uniform01(seed, offset + i) >= p (backend/philox.h); out = inp * keep / (1 - p)
void dropout_forward(void* out, const void* inp, int64_t n, float p, uint64_t seed,
                     uint64_t offset, DType dt, cudaStream_t stream);

}  // namespace tripod::backend::cuda
