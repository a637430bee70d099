// LayerNorm forward and backward. CUDA version of backend/cpu's layernorm.
// Reference: llm.c llmc/layernorm.cuh (warp-per-row shape; written anew here).
//
// Forward: one warp per row; mean, then variance around the mean (two
// passes: more stable than E[x^2]-E[x]^2 in f32), then the normalised row.
// Re-reads of the row hit L1/L2. Backward: one warp per row for dinp
// (dinp += ...), and a separate deterministic column reduction for dweight,
// dbias (see reduce.cuh), which re-reads dout and inp.
#include "backend/cuda/common.cuh"
#include "backend/cuda/layernorm.cuh"
#include "backend/cuda/reduce.cuh"

namespace tripod::backend::cuda {

// ---- kernels ----

constexpr int kWarpsPerBlock = 8;

template <typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp,
                                         const T* weight, const T* bias, float eps, int64_t N,
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

// dinp += rstd * (w*dout - mean(w*dout) - xhat * mean(w*dout*xhat))
template <typename T>
__global__ void layernorm_backward_kernel(T* dinp, const T* dout, const T* inp, const T* weight,
                                          const float* mean, const float* rstd, int64_t N, int C) {
  int lane = threadIdx.x % 32;
  int64_t row = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / 32;
  if (row >= N) return;
  const T* x = inp + row * C;
  const T* dy = dout + row * C;
  float m = mean[row], r = rstd[row];
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
    float g = to_f(weight[c]) * to_f(dy[c]);
    float xhat = (to_f(x[c]) - m) * r;
    dx[c] = from_f<T>(to_f(dx[c]) + (g - a - xhat * b) * r);
  }
}

// Per-chunk partial sums of dout*xhat (dweight) and dout (dbias); same block
// shape as bias_backward_kernel.
template <typename T>
__global__ void layernorm_params_backward_kernel(float* pw, float* pb, const T* dout,
                                                 const T* inp, const float* mean,
                                                 const float* rstd, int64_t N, int64_t C) {
  __shared__ float accw[8][33], accb[8][33];
  int64_t c = blockIdx.x * 32 + threadIdx.x;
  float sw = 0.f, sb = 0.f;
  if (c < C)
    for (int64_t r = blockIdx.y * 8 + threadIdx.y; r < N; r += int64_t(gridDim.y) * 8) {
      float dy = to_f(dout[r * C + c]);
      sw += dy * (to_f(inp[r * C + c]) - mean[r]) * rstd[r];
      sb += dy;
    }
  accw[threadIdx.y][threadIdx.x] = sw;
  accb[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int i = 1; i < 8; ++i) {
      sw += accw[i][threadIdx.x];
      sb += accb[i][threadIdx.x];
    }
    pw[blockIdx.y * C + c] = sw;
    pb[blockIdx.y * C + c] = sb;
  }
}

// ---- launchers ----

void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* weight,
                       const void* bias, float eps, int64_t N, int64_t C, DType dt,
                       cudaStream_t stream) {
  if (N == 0) return;
  unsigned grid = static_cast<unsigned>(ceil_div(N, kWarpsPerBlock));
  TRIPOD_DISPATCH_ACT(dt, T, layernorm_forward_kernel<<<grid, 32 * kWarpsPerBlock, 0, stream>>>(
      static_cast<T*>(out), mean, rstd, static_cast<const T*>(inp),
      static_cast<const T*>(weight), static_cast<const T*>(bias), eps, N, static_cast<int>(C)));
  TRIPOD_LAUNCH_CHECK();
}

void layernorm_backward(void* dinp, void* dweight, void* dbias, DType grad_dt, const void* dout,
                        const void* inp, const void* weight, const float* mean, const float* rstd,
                        int64_t N, int64_t C, DType dt, float* scratch, cudaStream_t stream) {
  if (N == 0) return;
  unsigned grid = static_cast<unsigned>(ceil_div(N, kWarpsPerBlock));
  int P = colsum_chunks(N);
  dim3 pgrid(static_cast<unsigned>(ceil_div(C, 32)), P), pblock(32, 8);
  TRIPOD_DISPATCH_ACT(dt, T, {
    layernorm_backward_kernel<<<grid, 32 * kWarpsPerBlock, 0, stream>>>(
        static_cast<T*>(dinp), static_cast<const T*>(dout), static_cast<const T*>(inp),
        static_cast<const T*>(weight), mean, rstd, N, static_cast<int>(C));
    TRIPOD_LAUNCH_CHECK();
    layernorm_params_backward_kernel<<<pgrid, pblock, 0, stream>>>(
        scratch, scratch + P * C, static_cast<const T*>(dout), static_cast<const T*>(inp), mean,
        rstd, N, C);
    TRIPOD_LAUNCH_CHECK();
  });
  colsum_finalize(dweight, grad_dt, scratch, P, C, stream);
  colsum_finalize(dbias, grad_dt, scratch + P * C, P, C, stream);
}

}  // namespace tripod::backend::cuda
