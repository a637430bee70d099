// Deterministic reductions shared by several ops: column sums of an (N, C)
// matrix (bias gradients, LayerNorm parameter gradients) and the sum of
// squares for the global gradient norm. Two passes (per-block partials in a
// scratch buffer, then one fixed-order sum), so results do not depend on
// scheduling: reruns are bit-identical.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tensor/dtype.h"

namespace tripod::backend::cuda {

// Row chunks used by column reductions of N rows; scratch needs
// colsum_chunks(N) * C floats per reduced quantity.
int colsum_chunks(int64_t N);

// dbias(OC) += sum over rows of dout(N, OC). dbias is f32 or dout's dtype.
void bias_backward(void* dbias, DType dbias_dt, const void* dout, DType dt, int64_t N, int64_t OC,
                   float* scratch, cudaStream_t stream);

// Adds partial(P, C) summed over P into dst(C) (f32 or an activation dtype).
void colsum_finalize(void* dst, DType dst_dt, const float* partial, int P, int64_t C,
                     cudaStream_t stream);

// Floats of scratch sum_squares needs.
constexpr int kSumSquaresBlocks = 1024;
// acc(1) f32 += sum of x^2.
void sum_squares(float* acc, const void* x, DType dt, int64_t n, float* scratch,
                 cudaStream_t stream);

}  // namespace tripod::backend::cuda
