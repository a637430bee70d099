// Fused causal self-attention launchers, flash-style: no T x T matrix is
// ever stored; the forward saves the log-sum-exp of each softmax row and the
// backward recomputes the probabilities from it (Dao et al., FlashAttention-2,
// Algorithms 1 and 2). CUDA version of backend/cpu's attention_forward /
// attention_backward; contracts in backend/ops.h.
// qkv (B, T, (NH + 2G) * HS) holds [Q: NH heads | K: G heads | V: G heads]
// (G == NH: multi-head attention; NH % G == 0, query head h uses K/V head
// h / (NH/G)); out (B, T, C = NH * HS); lse (B, NH, T) f32. HS must be 32,
// 64 or 128 for the own kernels (cuDNN takes multiples of 8 up to 256).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tensor/dtype.h"

namespace tripod::backend::cuda {

void attention_forward(void* out, float* lse, const void* qkv, int64_t B, int64_t T, int NH, int G,
                       int HS, DType dt, cudaStream_t stream);

// dqkv (qkv's layout) overwrite; dK/dV summed over each group's query heads. scratch: B * NH * T floats (the row dot
// products D_i = dout_i . out_i of FlashAttention-2).
void attention_backward(void* dqkv, const void* dout, const void* qkv, const void* out,
                        const float* lse, int64_t B, int64_t T, int NH, int G, int HS, DType dt,
                        float* scratch, cudaStream_t stream, bool deterministic = false);

}  // namespace tripod::backend::cuda
