// LayerNorm forward and backward. CUDA version of backend/cpu's layernorm.
// Reference: llm.c llmc/layernorm.cuh (warp-per-row shape; written anew here).
//
// Forward: one warp per row; mean, then variance around the mean (two
// passes: more stable than E[x^2]-E[x]^2 in f32), then the normalised row.
// Re-reads of the row hit L1/L2. Backward: one fused pass (see the kernel).
#include <cstdlib>
#include "backend/cuda/common.cuh"
#include "backend/cuda/layernorm.cuh"
#include "backend/cuda/reduce.cuh"

namespace tripod::backend::cuda {

// ---- kernels ----

constexpr int kWarpsPerBlock = 8;

// W: the weight/bias type, T or f32 (fp32 LayerNorm params under bf16/fp16).
template <typename T, typename W>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp,
                                         const W* weight, const W* bias, float eps, int64_t N,
                                         int C) {
  int lane = threadIdx.x % 32;
  int64_t row = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / 32;
  if (row >= N) return;
  const T* x = inp + row * C;
  float s = 0.f;
  for (int c = lane; c < C; c += 32) s += to_f(x[c]);
  float m = warp_sum(s) / C;
  float v = 0.f;
  for (int c = lane; c < C; c += 32) {
    float d = to_f(x[c]) - m;
    v += d * d;
  }
  float r = rsqrtf(warp_sum(v) / C + eps);
  T* y = out + row * C;
  for (int c = lane; c < C; c += 32)
    y[c] = from_f<T>((to_f(x[c]) - m) * r * to_f(weight[c]) + to_f(bias[c]));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// dinp += rstd * (w*dout - mean(w*dout) - xhat * mean(w*dout*xhat)), one warp
// per row; the same pass accumulates dweight (dout*xhat) and dbias (dout).
// Each warp sums its rows into its own f32 slice of shared memory (each
// column owned by one lane: no atomics), the block adds its slices in warp
// order into one partial row, and colsum_finalize adds the partials in block
// order: deterministic, and dout/inp are read from DRAM once.
constexpr int kBwdWarps = 4;

template <typename T, typename W>
__global__ void __launch_bounds__(32 * kBwdWarps) layernorm_backward_kernel(
    T* dinp, float* partial, const T* dout, const T* inp, const W* weight, const float* mean,
    const float* rstd, int64_t N, int C) {
  extern __shared__ float acc[];  // (kBwdWarps, 2, C)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* aw = acc + warp * 2 * C;
  float* ab = aw + C;
  for (int c = lane; c < C; c += 32) aw[c] = ab[c] = 0.f;
  for (int64_t row = blockIdx.x * int64_t(kBwdWarps) + warp; row < N;
       row += int64_t(gridDim.x) * kBwdWarps) {
    const T* x = inp + row * C;
    const T* dy = dout + row * C;
    const float m = mean[row], r = rstd[row];
    float a = 0.f, b = 0.f;
    for (int c = lane; c < C; c += 32) {
      float g = to_f(weight[c]) * to_f(dy[c]);
      a += g;
      b += g * (to_f(x[c]) - m) * r;
    }
    a = warp_sum(a) / C;
    b = warp_sum(b) / C;
    T* dx = dinp + row * C;
    for (int c = lane; c < C; c += 32) {
      float d = to_f(dy[c]), xhat = (to_f(x[c]) - m) * r;
      float g = to_f(weight[c]) * d;
      dx[c] = from_f<T>(to_f(dx[c]) + (g - a - xhat * b) * r);
      aw[c] += d * xhat;
      ab[c] += d;
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float sw = 0.f, sb = 0.f;
    for (int w = 0; w < kBwdWarps; ++w) {
      sw += acc[w * 2 * C + c];
      sb += acc[w * 2 * C + C + c];
    }
    partial[int64_t(blockIdx.x) * C + c] = sw;
    partial[int64_t(gridDim.x + blockIdx.x) * C + c] = sb;
  }
}

// ---- launchers ----

// The weight dtype is the activation dtype or f32.
#define TRIPOD_DISPATCH_LN_WEIGHT(wdt, T, W, ...)       \
  do {                                                  \
    if ((wdt) == ::tripod::DType::F32) {                \
      using W = float;                                  \
      __VA_ARGS__;                                      \
    } else {                                            \
      using W = T;                                      \
      __VA_ARGS__;                                      \
    }                                                   \
  } while (0)

void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* weight,
                       const void* bias, DType weight_dt, float eps, int64_t N, int64_t C, DType dt,
                       cudaStream_t stream) {
  if (N == 0) return;
  unsigned grid = static_cast<unsigned>(ceil_div(N, kWarpsPerBlock));
  TRIPOD_DISPATCH_ACT(dt, T, TRIPOD_DISPATCH_LN_WEIGHT(weight_dt, T, W,
      layernorm_forward_kernel<T, W><<<grid, 32 * kWarpsPerBlock, 0, stream>>>(
          static_cast<T*>(out), mean, rstd, static_cast<const T*>(inp),
          static_cast<const W*>(weight), static_cast<const W*>(bias), eps, N, static_cast<int>(C))));
  TRIPOD_LAUNCH_CHECK();
}

// Blocks of the backward: at least 4 rows per warp, at most kMaxBwdBlocks.
// The cap was 256, which left the kernel launch-starved at training sizes
// (N = 16K-64K rows: 16-64 rows per warp, ~2 blocks per SM); 1024 fills the
// SMs several blocks deep. The partials grow to 2 x 1024 x C floats, read
// once by colsum_finalize. TRIPOD_CUDA_LN_BWD_BLOCKS overrides the cap (for
// before/after timings).
int layernorm_backward_blocks(int64_t N) {
  static const int64_t cap = [] {
    const char* e = std::getenv("TRIPOD_CUDA_LN_BWD_BLOCKS");
    const long v = e ? std::strtol(e, nullptr, 10) : 0;
    return v > 0 ? int64_t(v) : int64_t(1024);
  }();
  int64_t p = ceil_div(N, 4 * kBwdWarps);
  return static_cast<int>(p < 1 ? 1 : (p > cap ? cap : p));
}

void layernorm_backward(void* dinp, void* dweight, void* dbias, DType grad_dt, const void* dout,
                        const void* inp, const void* weight, DType weight_dt, const float* mean,
                        const float* rstd, int64_t N, int64_t C, DType dt, float* scratch,
                        cudaStream_t stream) {
  if (N == 0) return;
  const int P = layernorm_backward_blocks(N);
  const size_t smem = sizeof(float) * kBwdWarps * 2 * C;
  TRIPOD_DISPATCH_ACT(dt, T, TRIPOD_DISPATCH_LN_WEIGHT(weight_dt, T, W, {
    TRIPOD_CUDA_CHECK(cudaFuncSetAttribute(layernorm_backward_kernel<T, W>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    layernorm_backward_kernel<T, W><<<P, 32 * kBwdWarps, smem, stream>>>(
        static_cast<T*>(dinp), scratch, static_cast<const T*>(dout), static_cast<const T*>(inp),
        static_cast<const W*>(weight), mean, rstd, N, static_cast<int>(C));
    TRIPOD_LAUNCH_CHECK();
  }));
  colsum_finalize(dweight, grad_dt, scratch, P, C, stream);
  colsum_finalize(dbias, grad_dt, scratch + int64_t(P) * C, P, C, stream);
}

}  // namespace tripod::backend::cuda
