// Fused softmax cross-entropy that never materialises the probabilities:
// step 1 the row max, step 2 the sum of exp(logit - max) and the target's
// logit, step 3 the loss; backward recomputes softmax on the fly and writes
// dlogits in place of (or beside) the logits. One 512-thread block per row:
// a row is 50K+ logits, so a block per row keeps every read coalesced.
// CUDA version of backend/cpu's ce_* ops.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cross_entropy.cuh"

namespace tripod::backend::cuda {

// ---- kernels ----

constexpr int kCeBlock = 512;

// kVec: rows are read in 16-byte packs (V a multiple of the pack, 16-byte
// aligned rows), which the 50K-wide rows of GPT-2 always allow.
template <typename T, bool kVec>
__global__ void ce_row_max_forward_kernel(float* row_max, const T* logits, int64_t V) {
  __shared__ float shared[32];
  const T* x = logits + blockIdx.x * V;
  float m = -INFINITY;
  if constexpr (kVec) {
    for (int64_t p = threadIdx.x; p < V / kPack<T>; p += blockDim.x) {
      Pack<T> v = load_pack(x + p * kPack<T>);
#pragma unroll
      for (int k = 0; k < kPack<T>; ++k) m = fmaxf(m, to_f(v.v[k]));
    }
  } else {
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, to_f(x[j]));
  }
  m = block_max(m, shared);
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

template <typename T, bool kVec>
__global__ void ce_row_sums_forward_kernel(float* sums, const T* logits, const float* row_max,
                                           const int32_t* targets, int64_t vocab_start, int64_t N,
                                           int64_t V) {
  __shared__ float shared[32];
  int64_t row = blockIdx.x;
  const T* x = logits + row * V;
  float m = row_max[row];
  float s = 0.f;
  if constexpr (kVec) {
    for (int64_t p = threadIdx.x; p < V / kPack<T>; p += blockDim.x) {
      Pack<T> v = load_pack(x + p * kPack<T>);
#pragma unroll
      for (int k = 0; k < kPack<T>; ++k) s += __expf(to_f(v.v[k]) - m);
    }
  } else {
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) s += __expf(to_f(x[j]) - m);
  }
  s = block_sum(s, shared);
  if (threadIdx.x == 0) {
    int64_t t = int64_t(targets[row]) - vocab_start;
    sums[row] = s;
    sums[N + row] = (t >= 0 && t < V) ? to_f(x[t]) : 0.f;
  }
}

__global__ void ce_loss_forward_kernel(float* losses, const float* sums, const float* row_max,
                                       int64_t N) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < N) losses[i] = logf(sums[i]) + row_max[i] - sums[N + i];
}

// Each element is read and written by the same thread, so dlogits may alias logits.
template <typename T, bool kVec>
__global__ void ce_backward_kernel(T* dlogits, const T* logits, const float* row_max,
                                   const float* sums, const int32_t* targets, int64_t vocab_start,
                                   float dloss, int64_t V) {
  int64_t row = blockIdx.x;
  const T* x = logits + row * V;
  T* dx = dlogits + row * V;
  float m = row_max[row];
  float scale = dloss / sums[row];
  int64_t t = int64_t(targets[row]) - vocab_start;
  if constexpr (kVec) {
    for (int64_t p = threadIdx.x; p < V / kPack<T>; p += blockDim.x) {
      Pack<T> v = load_pack(x + p * kPack<T>), d;
#pragma unroll
      for (int k = 0; k < kPack<T>; ++k) {
        int64_t j = p * kPack<T> + k;
        d.v[k] = from_f<T>(__expf(to_f(v.v[k]) - m) * scale - (j == t ? dloss : 0.f));
      }
      store_pack(dx + p * kPack<T>, d);
    }
  } else {
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x)
      dx[j] = from_f<T>(__expf(to_f(x[j]) - m) * scale - (j == t ? dloss : 0.f));
  }
}

// One read of the logits for the whole forward when the vocab is not split
// (tp = 1): each thread keeps an online (max, sum of exp) pair over its
// packs, the block merges the pairs, and with a gradient the same block
// reads its row again (from L2: a row is ~100 KB) to write dlogits in place.
// row_max / sums come out as the three-step path leaves them.
template <typename T, bool kVec>
__global__ void ce_fused_kernel(float* losses, float* row_max, float* sums, T* dlogits,
                                const T* logits, const int32_t* targets, float dloss,
                                bool with_grad, int64_t N, int64_t V) {
  __shared__ float sm[32], ss[32];
  const int64_t row = blockIdx.x;
  const T* x = logits + row * V;
  float m = -INFINITY, s = 0.f;
  auto add = [&](float v) {
    if (v > m) {
      s *= __expf(m - v);
      m = v;
    }
    s += __expf(v - m);
  };
  if constexpr (kVec) {
    for (int64_t p = threadIdx.x; p < V / kPack<T>; p += blockDim.x) {
      Pack<T> v = load_pack(x + p * kPack<T>);
#pragma unroll
      for (int k = 0; k < kPack<T>; ++k) add(to_f(v.v[k]));
    }
  } else {
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) add(to_f(x[j]));
  }
  // The target logit, read before the barrier below: dlogits may alias the
  // logits, and pass 2 overwrites the row.
  const int64_t t = targets[row];
  const float xt = (threadIdx.x == 0 && t >= 0 && t < V) ? to_f(x[t]) : 0.f;
  // Merge (m, s) pairs: warp, then block.
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int o = 16; o > 0; o >>= 1) {
    const float mo = __shfl_xor_sync(0xffffffffu, m, o), so = __shfl_xor_sync(0xffffffffu, s, o);
    const float mn = fmaxf(m, mo);
    s = (mn == -INFINITY) ? 0.f : s * __expf(m - mn) + so * __expf(mo - mn);
    m = mn;
  }
  if (lane == 0) {
    sm[warp] = m;
    ss[warp] = s;
  }
  __syncthreads();
  float M = -INFINITY;
  for (int w = 0; w < int(blockDim.x / 32); ++w) M = fmaxf(M, sm[w]);
  float S = 0.f;
  for (int w = 0; w < int(blockDim.x / 32); ++w) S += ss[w] * __expf(sm[w] - M);
  if (threadIdx.x == 0) {
    row_max[row] = M;
    sums[row] = S;
    sums[N + row] = xt;
    losses[row] = logf(S) + M - xt;
  }
  if (!with_grad) return;
  const float scale = dloss / S;
  T* dx = dlogits + row * V;
  if constexpr (kVec) {
    for (int64_t p = threadIdx.x; p < V / kPack<T>; p += blockDim.x) {
      Pack<T> v = load_pack(x + p * kPack<T>), d;
#pragma unroll
      for (int k = 0; k < kPack<T>; ++k) {
        const int64_t j = p * kPack<T> + k;
        d.v[k] = from_f<T>(__expf(to_f(v.v[k]) - M) * scale - (j == t ? dloss : 0.f));
      }
      store_pack(dx + p * kPack<T>, d);
    }
  } else {
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x)
      dx[j] = from_f<T>(__expf(to_f(x[j]) - M) * scale - (j == t ? dloss : 0.f));
  }
}

// ---- launchers ----

void ce_row_max(float* row_max, const void* logits, int64_t N, int64_t V_tp, DType dt,
                cudaStream_t stream) {
  if (N == 0) return;
  TRIPOD_DISPATCH_ACT(dt, T, {
    if (packable<T>(V_tp, logits))
      ce_row_max_forward_kernel<T, true><<<static_cast<unsigned>(N), kCeBlock, 0, stream>>>(
          row_max, static_cast<const T*>(logits), V_tp);
    else
      ce_row_max_forward_kernel<T, false><<<static_cast<unsigned>(N), kCeBlock, 0, stream>>>(
          row_max, static_cast<const T*>(logits), V_tp);
  });
  TRIPOD_LAUNCH_CHECK();
}

void ce_row_sums(float* sums, const void* logits, const float* row_max, const int32_t* targets,
                 int64_t vocab_start, int64_t N, int64_t V_tp, DType dt, cudaStream_t stream) {
  if (N == 0) return;
  TRIPOD_DISPATCH_ACT(dt, T, {
    if (packable<T>(V_tp, logits))
      ce_row_sums_forward_kernel<T, true><<<static_cast<unsigned>(N), kCeBlock, 0, stream>>>(
          sums, static_cast<const T*>(logits), row_max, targets, vocab_start, N, V_tp);
    else
      ce_row_sums_forward_kernel<T, false><<<static_cast<unsigned>(N), kCeBlock, 0, stream>>>(
          sums, static_cast<const T*>(logits), row_max, targets, vocab_start, N, V_tp);
  });
  TRIPOD_LAUNCH_CHECK();
}

void ce_loss(float* losses, const float* sums, const float* row_max, int64_t N,
             cudaStream_t stream) {
  if (N == 0) return;
  ce_loss_forward_kernel<<<static_cast<unsigned>(ceil_div(N, 256)), 256, 0, stream>>>(
      losses, sums, row_max, N);
  TRIPOD_LAUNCH_CHECK();
}

void ce_backward(void* dlogits, const void* logits, const float* row_max, const float* sums,
                 const int32_t* targets, int64_t vocab_start, float dloss, int64_t N,
                 int64_t V_tp, DType dt, cudaStream_t stream) {
  if (N == 0) return;
  TRIPOD_DISPATCH_ACT(dt, T, {
    if (packable<T>(V_tp, logits, dlogits))
      ce_backward_kernel<T, true><<<static_cast<unsigned>(N), kCeBlock, 0, stream>>>(
          static_cast<T*>(dlogits), static_cast<const T*>(logits), row_max, sums, targets,
          vocab_start, dloss, V_tp);
    else
      ce_backward_kernel<T, false><<<static_cast<unsigned>(N), kCeBlock, 0, stream>>>(
          static_cast<T*>(dlogits), static_cast<const T*>(logits), row_max, sums, targets,
          vocab_start, dloss, V_tp);
  });
  TRIPOD_LAUNCH_CHECK();
}

void ce_fused(float* losses, float* row_max, float* sums, void* dlogits, const void* logits,
              const int32_t* targets, float dloss, bool with_grad, int64_t N, int64_t V,
              DType dt, cudaStream_t stream) {
  if (N == 0) return;
  TRIPOD_DISPATCH_ACT(dt, T, {
    if (packable<T>(V, logits, dlogits))
      ce_fused_kernel<T, true><<<static_cast<unsigned>(N), kCeBlock, 0, stream>>>(
          losses, row_max, sums, static_cast<T*>(dlogits), static_cast<const T*>(logits), targets,
          dloss, with_grad, N, V);
    else
      ce_fused_kernel<T, false><<<static_cast<unsigned>(N), kCeBlock, 0, stream>>>(
          losses, row_max, sums, static_cast<T*>(dlogits), static_cast<const T*>(logits), targets,
          dloss, with_grad, N, V);
  });
  TRIPOD_LAUNCH_CHECK();
}

}  // namespace tripod::backend::cuda
