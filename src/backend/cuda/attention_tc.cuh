// Tensor-core (WMMA, bf16/f16) flash attention kernels used by attention.cu
// when the dtype, head size and alignment allow; see NOTE [Tensor-core
// attention] in attention_tc.cu. Internal to backend/cuda.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tensor/dtype.h"

namespace tripod::backend::cuda {

// bf16/f16, HS in {32, 64, 128}, 16-byte aligned rows and pointers.
bool attention_tc_supported(DType dt, int HS, int64_t C, const void* const* ptrs, int nptrs);

void attention_forward_tc(void* out, float* lse, const void* qkv, int64_t B, int64_t T, int NH,
                          int HS, DType dt, cudaStream_t stream);
// D (B, NH, T): row dot products dout . out, computed by the caller.
void attention_backward_tc(void* dqkv, const void* dout, const void* qkv, const float* lse,
                           const float* D, int64_t B, int64_t T, int NH, int HS, DType dt,
                           cudaStream_t stream);

}  // namespace tripod::backend::cuda
