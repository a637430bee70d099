// RMSNorm forward (also fused with the residual add) and backward. CUDA
// version of backend/cpu's rmsnorm.cpp, in the shape of the LayerNorm
// kernels of layernorm.cu.
//
// NOTE [RMSNorm kernels]
// Forward: one warp per row, VW elements per lane per step (VW = 16 bytes
// when the width and the pointers allow, 1 otherwise): the sum of squares,
// then the scaled row, re-read from L1/L2. The fused residual variant first
// stores residual = a + b rounded to T and takes the statistics from the
// rounded values, as add() then rmsnorm_forward() would; each lane re-reads
// only the elements it wrote, so residual may alias a or b.
// Backward: dx = rstd * (g - xhat * mean(g * xhat)) with g = w * dout,
// xhat = x * rstd, one warp per row; dweight (dout * xhat) accumulates in
// per-warp shared slices where lane i owns slot (k * VW + j) * 32 + i, i.e.
// column (i + 32 k) * VW + j (conflict-free), the block adds its warps'
// slices in warp order into one partial row, and colsum_finalize adds the
// partials in block order: deterministic, dout/inp read from DRAM once.
#include "backend/cuda/common.cuh"
#include "backend/cuda/reduce.cuh"
#include "backend/cuda/rmsnorm.cuh"

namespace tripod::backend::cuda {

namespace {

constexpr int kFwdWarps = 8;
constexpr int kBwdWarps = 4;

template <typename T, int VW> struct alignas(sizeof(T) * VW) Vec {
  T v[VW];
};

// kResidual: x = residual = a + b (stored); else x = a (b, residual unused).
template <typename T, typename W, int VW, bool kResidual>
__global__ void __launch_bounds__(32 * kFwdWarps) rmsnorm_forward_kernel(T* residual, T* out, float* rstd,
                                                                         const T* a, const T* b,
                                                                         const W* weight, float eps, int64_t N,
                                                                         int C) {
  using V = Vec<T, VW>;
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t(kFwdWarps) + threadIdx.x / 32;
  if (row >= N) return;
  const T* x = kResidual ? residual + row * C : a + row * C;
  float ss = 0.f;
  for (int c0 = lane * VW; c0 < C; c0 += 32 * VW) {
    V vx;
    if constexpr (kResidual) {
      const V va = *reinterpret_cast<const V*>(a + row * C + c0);
      const V vb = *reinterpret_cast<const V*>(b + row * C + c0);
#pragma unroll
      for (int j = 0; j < VW; ++j) vx.v[j] = from_f<T>(to_f(va.v[j]) + to_f(vb.v[j]));
      *reinterpret_cast<V*>(residual + row * C + c0) = vx;
    } else {
      vx = *reinterpret_cast<const V*>(x + c0);
    }
#pragma unroll
    for (int j = 0; j < VW; ++j) ss += to_f(vx.v[j]) * to_f(vx.v[j]);
  }
  const float r = rsqrtf(warp_sum(ss) / C + eps);
  T* y = out + row * C;
  for (int c0 = lane * VW; c0 < C; c0 += 32 * VW) {
    const V vx = *reinterpret_cast<const V*>(x + c0);
    V vy;
#pragma unroll
    for (int j = 0; j < VW; ++j) vy.v[j] = from_f<T>(to_f(vx.v[j]) * r * to_f(weight[c0 + j]));
    *reinterpret_cast<V*>(y + c0) = vy;
  }
  if (lane == 0) rstd[row] = r;
}

template <typename T, typename W, int VW>
__global__ void __launch_bounds__(32 * kBwdWarps) rmsnorm_backward_kernel(T* dinp, float* partial, const T* dout,
                                                                          const T* inp, const W* weight,
                                                                          const float* rstd, int64_t N, int C) {
  using V = Vec<T, VW>;
  extern __shared__ float acc[];  // (kBwdWarps, S) with S = K * VW * 32 slots
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int K = (C / VW + 31) / 32;  // vector steps per row
  const int S = K * VW * 32;
  float* aw = acc + warp * S;
  for (int s = lane; s < S; s += 32) aw[s] = 0.f;
  for (int64_t row = blockIdx.x * int64_t(kBwdWarps) + warp; row < N; row += int64_t(gridDim.x) * kBwdWarps) {
    const T* x = inp + row * C;
    const T* dy = dout + row * C;
    T* dx = dinp + row * C;
    const float r = rstd[row];
    float b = 0.f;
    for (int k = 0; k < K; ++k) {
      const int c0 = (lane + 32 * k) * VW;
      if (c0 >= C) break;
      const V xp = *reinterpret_cast<const V*>(x + c0), dp = *reinterpret_cast<const V*>(dy + c0);
#pragma unroll
      for (int j = 0; j < VW; ++j) b += to_f(weight[c0 + j]) * to_f(dp.v[j]) * to_f(xp.v[j]);
    }
    b = warp_sum(b) * r / C;  // mean(g * xhat)
    for (int k = 0; k < K; ++k) {
      const int c0 = (lane + 32 * k) * VW;
      if (c0 >= C) break;
      const V xp = *reinterpret_cast<const V*>(x + c0), dp = *reinterpret_cast<const V*>(dy + c0);
      V gp = *reinterpret_cast<const V*>(dx + c0);
#pragma unroll
      for (int j = 0; j < VW; ++j) {
        const float d = to_f(dp.v[j]), xhat = to_f(xp.v[j]) * r;
        gp.v[j] = from_f<T>(to_f(gp.v[j]) + (to_f(weight[c0 + j]) * d - xhat * b) * r);
        aw[(k * VW + j) * 32 + lane] += d * xhat;
      }
      *reinterpret_cast<V*>(dx + c0) = gp;
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const int v = c / VW, s = ((v / 32) * VW + c % VW) * 32 + v % 32;
    float sw = 0.f;
    for (int w = 0; w < kBwdWarps; ++w) sw += acc[w * S + s];
    partial[int64_t(blockIdx.x) * C + c] = sw;
  }
}

// The weight dtype is the activation dtype or f32.
#define TRIPOD_DISPATCH_RMS_WEIGHT(wdt, T, W, ...) \
  do {                                             \
    if ((wdt) == ::tripod::DType::F32) {           \
      using W = float;                             \
      __VA_ARGS__;                                 \
    } else {                                       \
      using W = T;                                 \
      __VA_ARGS__;                                 \
    }                                              \
  } while (0)

template <bool kResidual>
void forward(void* residual, void* out, float* rstd, const void* a, const void* b, const void* weight,
             DType weight_dt, float eps, int64_t N, int64_t C, DType dt, cudaStream_t stream) {
  if (N == 0) return;
  const unsigned grid = static_cast<unsigned>(ceil_div(N, kFwdWarps));
  TRIPOD_DISPATCH_ACT(dt, T, TRIPOD_DISPATCH_RMS_WEIGHT(weight_dt, T, W, {
    const bool packed = kResidual ? packable<T>(C, residual, out, a, b) : packable<T>(C, out, a);
    auto run = [&](auto kernel) {
      kernel<<<grid, 32 * kFwdWarps, 0, stream>>>(static_cast<T*>(residual), static_cast<T*>(out), rstd,
                                                   static_cast<const T*>(a), static_cast<const T*>(b),
                                                   static_cast<const W*>(weight), eps, N, static_cast<int>(C));
    };
    if (packed) run(rmsnorm_forward_kernel<T, W, kPack<T>, kResidual>);
    else run(rmsnorm_forward_kernel<T, W, 1, kResidual>);
  }));
  TRIPOD_LAUNCH_CHECK();
}

}  // namespace

void rmsnorm_forward(void* out, float* rstd, const void* inp, const void* weight, DType weight_dt, float eps,
                     int64_t N, int64_t C, DType dt, cudaStream_t stream) {
  forward<false>(nullptr, out, rstd, inp, nullptr, weight, weight_dt, eps, N, C, dt, stream);
}

void fused_residual_rmsnorm_forward(void* residual, void* out, float* rstd, const void* a, const void* b,
                                    const void* weight, DType weight_dt, float eps, int64_t N, int64_t C,
                                    DType dt, cudaStream_t stream) {
  forward<true>(residual, out, rstd, a, b, weight, weight_dt, eps, N, C, dt, stream);
}

// At least 4 rows per warp, at most 1024 blocks (as layernorm_backward_blocks).
int rmsnorm_backward_blocks(int64_t N) {
  const int64_t p = ceil_div(N, 4 * kBwdWarps);
  return static_cast<int>(p < 1 ? 1 : (p > 1024 ? 1024 : p));
}

void rmsnorm_backward(void* dinp, void* dweight, DType grad_dt, const void* dout, const void* inp,
                      const void* weight, DType weight_dt, const float* rstd, int64_t N, int64_t C, DType dt,
                      float* scratch, cudaStream_t stream) {
  if (N == 0) return;
  const int P = rmsnorm_backward_blocks(N);
  TRIPOD_DISPATCH_ACT(dt, T, TRIPOD_DISPATCH_RMS_WEIGHT(weight_dt, T, W, {
    auto run = [&](auto kernel, int VW) {
      const size_t smem = sizeof(float) * kBwdWarps * ceil_div(C / VW, 32) * VW * 32;
      TRIPOD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
      kernel<<<P, 32 * kBwdWarps, smem, stream>>>(static_cast<T*>(dinp), scratch, static_cast<const T*>(dout),
                                                  static_cast<const T*>(inp), static_cast<const W*>(weight), rstd,
                                                  N, static_cast<int>(C));
    };
    if (packable<T>(C, dinp, dout, inp)) run(rmsnorm_backward_kernel<T, W, kPack<T>>, kPack<T>);
    else run(rmsnorm_backward_kernel<T, W, 1>, 1);
    TRIPOD_LAUNCH_CHECK();
  }));
  colsum_finalize(dweight, grad_dt, scratch, P, C, stream);
}

}  // namespace tripod::backend::cuda
