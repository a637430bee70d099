// SwiGLU launchers (CUDA version of backend/cpu's swiglu.cpp; contracts in
// backend/ops.h): inp (N, 2F) = [gate | up] per row, out/dout (N, F), dinp
// (N, 2F), all of dtype dt.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tensor/dtype.h"

namespace tripod::backend::cuda {

void swiglu_forward(void* out, const void* inp, int64_t N, int64_t F, DType dt, cudaStream_t stream);
void swiglu_backward(void* dinp, const void* inp, const void* dout, int64_t N, int64_t F, DType dt,
                     cudaStream_t stream);

}  // namespace tripod::backend::cuda
