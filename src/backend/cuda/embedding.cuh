// Vocab-parallel embedding launchers (CUDA version of backend/cpu's
// embedding_forward/backward; contracts in backend/ops.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tensor/dtype.h"

namespace tripod::backend::cuda {

// out(B,T,C) = wte[tok - vocab_start] (zero row outside [vocab_start, +V_tp)) + wpe[t] (if given)
void embedding_forward(void* out, const int32_t* tokens, const void* wte, const void* wpe,
                       int64_t B, int64_t T, int64_t C, int64_t V_tp, int64_t vocab_start,
                       DType dt, cudaStream_t stream);
// dwte(V_tp,C) += scatter of dout rows (may be null); dwpe(T,C) += sum_b dout (may be null).
// deterministic: dwte without atomics (rows sorted by token, each token's
// rows summed in row order by one block), bit-repeatable from run to run.
void embedding_backward(void* dwte, void* dwpe, DType grad_dt, const void* dout,
                        const int32_t* tokens, int64_t B, int64_t T, int64_t C, int64_t V_tp,
                        int64_t vocab_start, DType dt, cudaStream_t stream, bool deterministic = false);

}  // namespace tripod::backend::cuda
