// LayerNorm forward and backward. CUDA version of backend/cpu's layernorm.
// Reference: llm.c llmc/layernorm.cuh (warp-per-row shape; written anew here).
//
// Forward: one warp per row; mean, then variance around the mean (two
// passes: more stable than E[x^2]-E[x]^2 in f32), then the normalised row.
// Re-reads of the row hit L1/L2. Fused residual forward: the same with the
// residual add in front and 16-byte packs. Backward: one fused pass (see the kernels:
// 16-byte packed when the width and pointers allow, element loads otherwise).
#include "backend/cuda/common.cuh"
#include "base/debug_config.h"
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

// Fused residual add + LayerNorm forward (llm.c's fused_residual_forward
// shape, written anew): one warp per row, VW elements per lane per step
// (16-byte loads and stores when the width and pointers allow, VW = 1
// otherwise). residual = a + b is rounded to T and stored first; the
// statistics and the normalised row are taken from the rounded values, as
// add() then layernorm_forward() would. Each lane re-reads only the
// elements it wrote, so no barrier is needed; residual may alias a or b.
template <typename T, int VW> struct alignas(sizeof(T) * VW) Vec {
  T v[VW];
};

template <typename T, typename W, int VW>
__global__ void fused_residual_layernorm_forward_kernel(T* residual, T* out, float* mean, float* rstd,
                                                        const T* a, const T* b, const W* weight,
                                                        const W* bias, float eps, int64_t N, int C) {
  using V = Vec<T, VW>;
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / 32;
  if (row >= N) return;
  const T* xa = a + row * C;
  const T* xb = b + row * C;
  T* r = residual + row * C;
  float s = 0.f;
  for (int c0 = lane * VW; c0 < C; c0 += 32 * VW) {
    const V va = *reinterpret_cast<const V*>(xa + c0), vb = *reinterpret_cast<const V*>(xb + c0);
    V vr;
#pragma unroll
    for (int j = 0; j < VW; ++j) {
      vr.v[j] = from_f<T>(to_f(va.v[j]) + to_f(vb.v[j]));
      s += to_f(vr.v[j]);
    }
    *reinterpret_cast<V*>(r + c0) = vr;
  }
  const float m = warp_sum(s) / C;
  float var = 0.f;
  for (int c0 = lane * VW; c0 < C; c0 += 32 * VW) {
    const V vr = *reinterpret_cast<const V*>(r + c0);
#pragma unroll
    for (int j = 0; j < VW; ++j) {
      const float d = to_f(vr.v[j]) - m;
      var += d * d;
    }
  }
  const float rs = rsqrtf(warp_sum(var) / C + eps);
  T* y = out + row * C;
  for (int c0 = lane * VW; c0 < C; c0 += 32 * VW) {
    const V vr = *reinterpret_cast<const V*>(r + c0);
    V vy;
#pragma unroll
    for (int j = 0; j < VW; ++j)
      vy.v[j] = from_f<T>((to_f(vr.v[j]) - m) * rs * to_f(weight[c0 + j]) + to_f(bias[c0 + j]));
    *reinterpret_cast<V*>(y + c0) = vy;
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = rs;
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
    const float* rstd, int64_t N, int C, T* out, const W* bias) {
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
      if (out) out[row * C + c] = from_f<T>((to_f(x[c]) - m) * r * to_f(weight[c]) + to_f(bias[c]));
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

// Packed backward (llm.c's layernorm_backward_kernel10 shape, written anew):
// one warp per row, 16-byte loads of dout/inp/dinp (VW = 16 / sizeof(T)
// elements per lane per step), the row re-read for the second pass from L1.
// dweight/dbias accumulate in per-warp shared slices laid out so that lane i
// always owns slot (k * VW + j) * 32 + i (conflict-free), i.e. column
// (i + 32 k) * VW + j. At the end the block adds its warps' slices in warp
// order into one partial row per block; colsum_finalize adds the partials
// in block order (deterministic). Needs C % VW == 0 and 16-byte aligned rows.
template <typename T, typename W>
__global__ void __launch_bounds__(32 * kBwdWarps) layernorm_backward_packed_kernel(
    T* dinp, float* partial, const T* dout, const T* inp, const W* weight, const float* mean,
    const float* rstd, int64_t N, int C, T* out, const W* bias) {
  constexpr int VW = kPack<T>;
  extern __shared__ float acc[];  // (kBwdWarps, 2, S) with S = K * VW * 32 slots
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int K = (C / VW + 31) / 32;  // vector steps per row
  const int S = K * VW * 32;
  float* aw = acc + warp * 2 * S;
  float* ab = aw + S;
  for (int s = lane; s < 2 * S; s += 32) aw[s] = 0.f;
  for (int64_t row = blockIdx.x * int64_t(kBwdWarps) + warp; row < N;
       row += int64_t(gridDim.x) * kBwdWarps) {
    const T* x = inp + row * C;
    const T* dy = dout + row * C;
    T* dx = dinp + row * C;
    const float m = mean[row], r = rstd[row];
    float a = 0.f, b = 0.f;
    for (int k = 0; k < K; ++k) {
      const int c0 = (lane + 32 * k) * VW;
      if (c0 >= C) break;
      const Pack<T> xp = load_pack(x + c0), dp = load_pack(dy + c0);
#pragma unroll
      for (int j = 0; j < VW; ++j) {
        const float g = to_f(weight[c0 + j]) * to_f(dp.v[j]);
        a += g;
        b += g * (to_f(xp.v[j]) - m) * r;
      }
    }
    a = warp_sum(a) / C;
    b = warp_sum(b) / C;
    for (int k = 0; k < K; ++k) {
      const int c0 = (lane + 32 * k) * VW;
      if (c0 >= C) break;
      const Pack<T> xp = load_pack(x + c0), dp = load_pack(dy + c0);
      Pack<T> gp = load_pack(dx + c0);
      Pack<T> yp;
#pragma unroll
      for (int j = 0; j < VW; ++j) {
        const float d = to_f(dp.v[j]), xhat = (to_f(xp.v[j]) - m) * r;
        const float g = to_f(weight[c0 + j]) * d;
        gp.v[j] = from_f<T>(to_f(gp.v[j]) + (g - a - xhat * b) * r);
        // The forward's expression, term for term (layernorm_forward_kernel).
        if (out) yp.v[j] = from_f<T>((to_f(xp.v[j]) - m) * r * to_f(weight[c0 + j]) + to_f(bias[c0 + j]));
        const int s = (k * VW + j) * 32 + lane;
        aw[s] += d * xhat;
        ab[s] += d;
      }
      store_pack(dx + c0, gp);
      if (out) store_pack(out + row * C + c0, yp);
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const int v = c / VW, s = ((v / 32) * VW + c % VW) * 32 + v % 32;
    float sw = 0.f, sb = 0.f;
    for (int w = 0; w < kBwdWarps; ++w) {
      sw += acc[w * 2 * S + s];
      sb += acc[w * 2 * S + S + s];
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

void fused_residual_layernorm_forward(void* residual, void* out, float* mean, float* rstd, const void* a,
                                      const void* b, const void* weight, const void* bias, DType weight_dt,
                                      float eps, int64_t N, int64_t C, DType dt, cudaStream_t stream) {
  if (N == 0) return;
  const unsigned grid = static_cast<unsigned>(ceil_div(N, kWarpsPerBlock));
  TRIPOD_DISPATCH_ACT(dt, T, TRIPOD_DISPATCH_LN_WEIGHT(weight_dt, T, W, {
    if (packable<T>(C, residual, out, a, b))
      fused_residual_layernorm_forward_kernel<T, W, kPack<T>><<<grid, 32 * kWarpsPerBlock, 0, stream>>>(
          static_cast<T*>(residual), static_cast<T*>(out), mean, rstd, static_cast<const T*>(a),
          static_cast<const T*>(b), static_cast<const W*>(weight), static_cast<const W*>(bias), eps, N,
          static_cast<int>(C));
    else
      fused_residual_layernorm_forward_kernel<T, W, 1><<<grid, 32 * kWarpsPerBlock, 0, stream>>>(
          static_cast<T*>(residual), static_cast<T*>(out), mean, rstd, static_cast<const T*>(a),
          static_cast<const T*>(b), static_cast<const W*>(weight), static_cast<const W*>(bias), eps, N,
          static_cast<int>(C));
  }));
  TRIPOD_LAUNCH_CHECK();
}

// Blocks of the backward: at least 4 rows per warp, at most kMaxBwdBlocks.
// The cap was 256, which left the kernel launch-starved at training sizes
// (N = 16K-64K rows: 16-64 rows per warp, ~2 blocks per SM); 1024 fills the
// SMs several blocks deep. The partials grow to 2 x 1024 x C floats, read
// once by colsum_finalize. TRIPOD_CUDA_LN_BWD_BLOCKS (base/debug_config.h)
// overrides the cap (for before/after timings).
int layernorm_backward_blocks(int64_t N) {
  const int64_t v = debug_config().cuda_ln_bwd_blocks;
  const int64_t cap = v > 0 ? v : int64_t(1024);
  int64_t p = ceil_div(N, 4 * kBwdWarps);
  return static_cast<int>(p < 1 ? 1 : (p > cap ? cap : p));
}

void layernorm_backward(void* dinp, void* dweight, void* dbias, DType grad_dt, const void* dout,
                        const void* inp, const void* weight, DType weight_dt, const float* mean,
                        const float* rstd, int64_t N, int64_t C, DType dt, float* scratch,
                        cudaStream_t stream, void* out, const void* bias) {
  if (N == 0) return;
  const int P = layernorm_backward_blocks(N);
  TRIPOD_DISPATCH_ACT(dt, T, TRIPOD_DISPATCH_LN_WEIGHT(weight_dt, T, W, {
    constexpr int VW = kPack<T>;
    if (packable<T>(C, dinp, dout, inp) && (!out || packable<T>(C, out, out, out))) {
      const size_t smem = sizeof(float) * kBwdWarps * 2 * ceil_div(C / VW, 32) * VW * 32;
      TRIPOD_CUDA_CHECK(cudaFuncSetAttribute(layernorm_backward_packed_kernel<T, W>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
      layernorm_backward_packed_kernel<T, W><<<P, 32 * kBwdWarps, smem, stream>>>(
          static_cast<T*>(dinp), scratch, static_cast<const T*>(dout), static_cast<const T*>(inp),
          static_cast<const W*>(weight), mean, rstd, N, static_cast<int>(C), static_cast<T*>(out),
          static_cast<const W*>(bias));
    } else {
      const size_t smem = sizeof(float) * kBwdWarps * 2 * C;
      TRIPOD_CUDA_CHECK(cudaFuncSetAttribute(layernorm_backward_kernel<T, W>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
      layernorm_backward_kernel<T, W><<<P, 32 * kBwdWarps, smem, stream>>>(
          static_cast<T*>(dinp), scratch, static_cast<const T*>(dout), static_cast<const T*>(inp),
          static_cast<const W*>(weight), mean, rstd, N, static_cast<int>(C), static_cast<T*>(out),
          static_cast<const W*>(bias));
    }
    TRIPOD_LAUNCH_CHECK();
  }));
  colsum_finalize(dweight, grad_dt, scratch, P, C, stream);
  colsum_finalize(dbias, grad_dt, scratch + int64_t(P) * C, P, C, stream);
}

}  // namespace tripod::backend::cuda
