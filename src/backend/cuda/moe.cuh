// Mixture-of-experts launchers (CUDA version of backend/cpu's moe.cpp;
// contracts in backend/ops.h, "mixture of experts"). Router tensors
// (logits, probs, dprobs, dlogits, losses, expert bias) are f32, indices and
// row maps i32; the row tensors are of the activation dtype dt. Every
// kernel is deterministic: integer counting, sums in a fixed order (per
// token in slot order, per row a fixed warp tree), no float atomics.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tensor/dtype.h"

namespace tripod::backend::cuda {

// ---- the router (moe_router.cu): one thread per token, math in double as
// the reference, so the choice and its ties (the lower expert wins) are the
// reference's ----

// probs (N, k), indices (N, k) from logits (N, E); bias (E) or null (sigmoid only).
void moe_router_topk(float* probs, int32_t* indices, const float* logits, const float* bias, int64_t N, int64_t E,
                     int k, bool use_sigmoid, bool pre_softmax, float scaling, cudaStream_t stream);
// dlogits (N, E) = d probs / d logits applied to dprobs (N, k) (overwrite).
void moe_router_topk_backward(float* dlogits, const float* dprobs, const float* logits, const int32_t* indices,
                              int64_t N, int64_t E, int k, bool use_sigmoid, bool pre_softmax, float scaling,
                              cudaStream_t stream);
// The f64 scratch the auxiliary losses need, in doubles.
int64_t moe_aux_loss_scratch(int64_t N, int64_t E, int k, int64_t seq_length);
// losses (2) = [aux, z]; dlogits (N, E) += grad_scale d(aux + z)/d logits when not null.
// scratch: moe_aux_loss_scratch(...) doubles of device memory.
void moe_aux_loss(float* dlogits, float* losses, const float* logits, int64_t N, int64_t E, int k,
                  bool use_sigmoid, int64_t seq_length, float aux_coeff, float z_coeff, float grad_scale,
                  double* scratch, cudaStream_t stream);

// ---- the dispatch order and the row gathers (moe.cu) ----

// row_map (slots), counts (E) from indices (slots) and probs (slots);
// capacity < 0: dropless. scratch: E ints of device memory.
void moe_permute_map(int32_t* row_map, int32_t* counts, const int32_t* indices, const float* probs, int64_t slots,
                     int64_t E, int64_t capacity, bool drop_by_probs, int32_t* scratch, cudaStream_t stream);
// out (R, C)[r] = inp (N, C)[row_map[r] / k].
void moe_permute(void* out, const void* inp, const int32_t* row_map, int64_t R, int64_t C, int k, DType dt,
                 cudaStream_t stream);
// out (N, C)[n] = sum over n's kept slots s, in slot order, of probs[s] inp (R, C)[row of s]
// (probs null: weight 1, the transpose of moe_permute). inverse: N k ints of device memory.
void moe_unpermute(void* out, const void* inp, const int32_t* row_map, const float* probs, int64_t N, int64_t R,
                   int64_t C, int k, int32_t* inverse, DType dt, cudaStream_t stream);
// dinp (R, C)[r] = probs[s] dout[s / k] and dprobs[s] = dout[s / k] . inp[r] for s = row_map[r]
// (dprobs 0 at dropped slots).
void moe_unpermute_backward(void* dinp, float* dprobs, const void* dout, const void* inp, const int32_t* row_map,
                            const float* probs, int64_t N, int64_t R, int64_t C, int k, DType dt,
                            cudaStream_t stream);

}  // namespace tripod::backend::cuda
