// Embedding forward/backward (token + position), vocab-parallel as Megatron's
// VocabParallelEmbedding: tokens outside this tp rank's vocab range give a
// zero row, and the tp group sums the partial rows.
// Backward: dwte by atomic adds (a token can repeat within a batch; the
// order of f32 adds varies between runs at the rounding level), dwpe by a
// fixed-order sum over the batch (deterministic).
#include "backend/cuda/common.cuh"
#include "backend/cuda/embedding.cuh"

namespace tripod::backend::cuda {

// ---- kernels ----

__device__ __forceinline__ void atomic_add_f(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add_f(bf16* p, float v) { atomicAdd(p, __float2bfloat16_rn(v)); }
__device__ __forceinline__ void atomic_add_f(f16* p, float v) { atomicAdd(p, __float2half_rn(v)); }

// One block per (b, t) row; threads over C.
template <typename T>
__global__ void embedding_forward_kernel(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                                         int64_t T_, int64_t C, int64_t V_tp, int64_t vocab_start) {
  int64_t row = blockIdx.x;
  int64_t t = row % T_;
  int64_t tok = int64_t(tokens[row]) - vocab_start;
  bool local = tok >= 0 && tok < V_tp;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float v = local ? to_f(wte[tok * C + c]) : 0.f;
    if (wpe) v += to_f(wpe[t * C + c]);
    out[row * C + c] = from_f<T>(v);
  }
}

template <typename T, typename G>
__global__ void embedding_wte_backward_kernel(G* dwte, const T* dout, const int32_t* tokens,
                                              int64_t C, int64_t V_tp, int64_t vocab_start) {
  int64_t row = blockIdx.x;
  int64_t tok = int64_t(tokens[row]) - vocab_start;
  if (tok < 0 || tok >= V_tp) return;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    atomic_add_f(dwte + tok * C + c, to_f(dout[row * C + c]));
}

template <typename T, typename G>
__global__ void embedding_wpe_backward_kernel(G* dwpe, const T* dout, int64_t B, int64_t T_,
                                              int64_t C) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;  // over T*C
  if (i >= T_ * C) return;
  float s = 0.f;
  for (int64_t b = 0; b < B; ++b) s += to_f(dout[b * T_ * C + i]);
  dwpe[i] = from_f<G>(to_f(dwpe[i]) + s);
}

// ---- launchers ----

void embedding_forward(void* out, const int32_t* tokens, const void* wte, const void* wpe,
                       int64_t B, int64_t T, int64_t C, int64_t V_tp, int64_t vocab_start,
                       DType dt, cudaStream_t stream) {
  if (B * T == 0) return;
  TRIPOD_DISPATCH_ACT(dt, A, embedding_forward_kernel<<<static_cast<unsigned>(B * T), 256, 0, stream>>>(
      static_cast<A*>(out), tokens, static_cast<const A*>(wte), static_cast<const A*>(wpe), T, C,
      V_tp, vocab_start));
  TRIPOD_LAUNCH_CHECK();
}

void embedding_backward(void* dwte, void* dwpe, DType grad_dt, const void* dout,
                        const int32_t* tokens, int64_t B, int64_t T, int64_t C, int64_t V_tp,
                        int64_t vocab_start, DType dt, cudaStream_t stream) {
  if (B * T == 0) return;
  TRIPOD_DISPATCH_ACT(dt, A, TRIPOD_DISPATCH_ACT(grad_dt, G, {
    if (dwte) {
      embedding_wte_backward_kernel<A, G><<<static_cast<unsigned>(B * T), 256, 0, stream>>>(
          static_cast<G*>(dwte), static_cast<const A*>(dout), tokens, C, V_tp, vocab_start);
      TRIPOD_LAUNCH_CHECK();
    }
    if (dwpe) {
      embedding_wpe_backward_kernel<A, G><<<static_cast<unsigned>(ceil_div(T * C, 256)), 256, 0, stream>>>(
          static_cast<G*>(dwpe), static_cast<const A*>(dout), B, T, C);
      TRIPOD_LAUNCH_CHECK();
    }
  }));
}

}  // namespace tripod::backend::cuda
