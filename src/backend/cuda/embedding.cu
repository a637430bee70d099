// Embedding forward/backward (token + position), vocab-parallel as Megatron's
// VocabParallelEmbedding: tokens outside this tp rank's vocab range give a
// zero row, and the tp group sums the partial rows.
// Backward: dwte by atomic adds (a token can repeat within a batch; the
// order of f32 adds varies between runs at the rounding level), dwpe by a
// fixed-order sum over the batch (deterministic). Under --deterministic-mode
// dwte goes without atomics: the rows are sorted by token (a stable radix
// sort, so a token's rows stay in row order) and one block per distinct
// token adds its rows in that order, then adds the sum to dwte once.
#include <cub/device/device_radix_sort.cuh>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
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

// keys[i] = local token of row i (V_tp outside this rank's range: sorted last, skipped); rows[i] = i.
__global__ void embedding_sort_keys_kernel(int32_t* keys, int32_t* rows, const int32_t* tokens, int64_t n,
                                           int64_t V_tp, int64_t vocab_start) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  int64_t tok = int64_t(tokens[i]) - vocab_start;
  keys[i] = (tok < 0 || tok >= V_tp) ? static_cast<int32_t>(V_tp) : static_cast<int32_t>(tok);
  rows[i] = static_cast<int32_t>(i);
}

// One block per sorted position that starts a run of one token: the run's
// dout rows summed in row order (8 rows' loads in flight at a time), then
// dwte[tok] += sum. No two blocks write one row of dwte.
template <typename T, typename G>
__global__ void embedding_wte_backward_sorted_kernel(G* dwte, const T* dout, const int32_t* keys,
                                                     const int32_t* rows, int64_t n, int64_t C, int64_t V_tp) {
  const int64_t i = blockIdx.x;
  const int32_t tok = keys[i];
  if (tok >= V_tp || (i > 0 && keys[i - 1] == tok)) return;
  int64_t end = i + 1;
  while (end < n && keys[end] == tok) ++end;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float s = 0.f;
    int64_t j = i;
    for (; j + 8 <= end; j += 8) {
      float v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) v[u] = to_f(dout[int64_t(rows[j + u]) * C + c]);
#pragma unroll
      for (int u = 0; u < 8; ++u) s += v[u];
    }
    for (; j < end; ++j) s += to_f(dout[int64_t(rows[j]) * C + c]);
    G* p = dwte + int64_t(tok) * C + c;
    *p = from_f<G>(to_f(*p) + s);
  }
}

static void embedding_wte_backward_deterministic(void* dwte, DType grad_dt, const void* dout, const int32_t* tokens,
                                                 int64_t n, int64_t C, int64_t V_tp, int64_t vocab_start, DType dt,
                                                 cudaStream_t stream) {
  // int32 keys and row indices: one micro-batch has far fewer than 2^31 rows, a vocabulary too.
  int end_bit = 1;
  while ((int64_t(1) << end_bit) <= V_tp) ++end_bit;  // keys in [0, V_tp]
  size_t temp_bytes = 0;
  TRIPOD_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, static_cast<const int32_t*>(nullptr),
                                                    static_cast<int32_t*>(nullptr),
                                                    static_cast<const int32_t*>(nullptr),
                                                    static_cast<int32_t*>(nullptr), n, 0, end_bit, stream));
  const size_t arr = (size_t(n) * sizeof(int32_t) + 255) / 256 * 256;
  char* buf = nullptr;
  TRIPOD_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&buf), 4 * arr + temp_bytes, stream));
  int32_t* keys_in = reinterpret_cast<int32_t*>(buf);
  int32_t* rows_in = reinterpret_cast<int32_t*>(buf + arr);
  int32_t* keys = reinterpret_cast<int32_t*>(buf + 2 * arr);
  int32_t* rows = reinterpret_cast<int32_t*>(buf + 3 * arr);
  embedding_sort_keys_kernel<<<static_cast<unsigned>(ceil_div(n, 256)), 256, 0, stream>>>(keys_in, rows_in, tokens,
                                                                                          n, V_tp, vocab_start);
  TRIPOD_LAUNCH_CHECK();
  TRIPOD_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(buf + 4 * arr, temp_bytes, keys_in, keys, rows_in, rows, n, 0,
                                                    end_bit, stream));
  TRIPOD_DISPATCH_ACT(dt, A, TRIPOD_DISPATCH_ACT(grad_dt, G, {
    embedding_wte_backward_sorted_kernel<A, G><<<static_cast<unsigned>(n), 256, 0, stream>>>(
        static_cast<G*>(dwte), static_cast<const A*>(dout), keys, rows, n, C, V_tp);
    TRIPOD_LAUNCH_CHECK();
  }));
  TRIPOD_CUDA_CHECK(cudaFreeAsync(buf, stream));
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
                        int64_t vocab_start, DType dt, cudaStream_t stream, bool deterministic) {
  if (B * T == 0) return;
  if (dwte && deterministic) {
    embedding_wte_backward_deterministic(dwte, grad_dt, dout, tokens, B * T, C, V_tp, vocab_start, dt, stream);
    dwte = nullptr;
  }
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
