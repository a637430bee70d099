// Vocab-parallel softmax cross-entropy launchers, in the three steps of
// backend/ops.h (Megatron's _VocabParallelCrossEntropy). logits/dlogits are
// (N, V_tp) of dtype `dt`; row_max(N), sums(2,N), losses(N) are f32;
// targets(N) i32 global token ids.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tensor/dtype.h"

namespace tripod::backend::cuda {

void ce_row_max(float* row_max, const void* logits, int64_t N, int64_t V_tp, DType dt,
                cudaStream_t stream);
void ce_row_sums(float* sums, const void* logits, const float* row_max, const int32_t* targets,
                 int64_t vocab_start, int64_t N, int64_t V_tp, DType dt, cudaStream_t stream);
void ce_loss(float* losses, const float* sums, const float* row_max, int64_t N,
             cudaStream_t stream);
void ce_backward(void* dlogits, const void* logits, const float* row_max, const float* sums,
                 const int32_t* targets, int64_t vocab_start, float dloss, int64_t N,
                 int64_t V_tp, DType dt, cudaStream_t stream);
// Unsplit vocab (tp = 1): the three forward steps in one read of the logits,
// plus, with with_grad, ce_backward (dlogits may alias logits).
void ce_fused(float* losses, float* row_max, float* sums, void* dlogits, const void* logits,
              const int32_t* targets, float dloss, bool with_grad, int64_t N, int64_t V,
              DType dt, cudaStream_t stream);

}  // namespace tripod::backend::cuda
