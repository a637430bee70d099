// Elementwise kernels: cast, add, scale, add_bias, GELU (tanh form, as GPT-2
// and Megatron's gelu_impl), counter-based dropout. CUDA version of the same
// ops in backend/cpu; see backend/ops.h for the contracts.
// All are memory-bound: one read and one write per element, grid-stride
// loops, math in f32 whatever the storage type.
#include "backend/cuda/common.cuh"
#include "backend/philox.h"
#include "backend/cuda/elementwise.cuh"

namespace tripod::backend::cuda {

// ---- kernels ----

// Dropout draws its mask from backend/philox.h (shared with the CPU backend),
// so both backends drop the same elements for the same (seed, offset).

template <typename D, typename S>
__global__ void cast_forward_kernel(D* dst, const S* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = from_f<D>(to_f(src[i]));
}

template <typename T>
__global__ void add_forward_kernel(T* out, const T* a, const T* b, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = from_f<T>(to_f(a[i]) + to_f(b[i]));
}

template <typename T>
__global__ void scale_forward_kernel(T* t, float s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    t[i] = from_f<T>(to_f(t[i]) * s);
}

template <typename T>
__global__ void add_bias_forward_kernel(T* out, const T* bias, int64_t n, int64_t OC) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = from_f<T>(to_f(out[i]) + to_f(bias[i % OC]));
}

// GELU(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)

__device__ __forceinline__ float gelu_f(float x) {
  float u = kGeluScale * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.f + tanhf(u));
}
__device__ __forceinline__ float gelu_grad_f(float x) {
  float u = kGeluScale * (x + 0.044715f * x * x * x);
  float th = tanhf(u);
  return 0.5f * (1.f + th) + 0.5f * x * (1.f - th * th) * kGeluScale * (1.f + 3.f * 0.044715f * x * x);
}

// Pack variants (n a multiple of the pack, pointers 16-byte aligned).
template <typename T>
__global__ void add_forward_kernel_vec(T* out, const T* a, const T* b, int64_t npacks) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < npacks;
       i += int64_t(gridDim.x) * blockDim.x) {
    Pack<T> x = load_pack(a + i * kPack<T>), y = load_pack(b + i * kPack<T>), z;
#pragma unroll
    for (int k = 0; k < kPack<T>; ++k) z.v[k] = from_f<T>(to_f(x.v[k]) + to_f(y.v[k]));
    store_pack(out + i * kPack<T>, z);
  }
}

template <typename T>
__global__ void gelu_forward_kernel_vec(T* out, const T* inp, int64_t npacks) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < npacks;
       i += int64_t(gridDim.x) * blockDim.x) {
    Pack<T> x = load_pack(inp + i * kPack<T>), y;
#pragma unroll
    for (int k = 0; k < kPack<T>; ++k) y.v[k] = from_f<T>(gelu_f(to_f(x.v[k])));
    store_pack(out + i * kPack<T>, y);
  }
}

template <typename T>
__global__ void gelu_backward_kernel_vec(T* dinp, const T* inp, const T* dout, int64_t npacks) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < npacks;
       i += int64_t(gridDim.x) * blockDim.x) {
    Pack<T> x = load_pack(inp + i * kPack<T>), g = load_pack(dout + i * kPack<T>), y;
#pragma unroll
    for (int k = 0; k < kPack<T>; ++k) y.v[k] = from_f<T>(gelu_grad_f(to_f(x.v[k])) * to_f(g.v[k]));
    store_pack(dinp + i * kPack<T>, y);
  }
}

template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = from_f<T>(gelu_f(to_f(inp[i])));
  }
}

template <typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    dinp[i] = from_f<T>(gelu_grad_f(to_f(inp[i])) * to_f(dout[i]));
  }
}

template <typename T>
__global__ void dropout_forward_kernel(T* out, const T* inp, int64_t n, float p, uint64_t seed,
                                       uint64_t offset) {
  float keep_scale = 1.f / (1.f - p);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    bool keep = uniform01(seed, offset + uint64_t(i)) >= p;
    out[i] = from_f<T>(keep ? to_f(inp[i]) * keep_scale : 0.f);
  }
}

// ---- launchers ----

constexpr int kBlock = 256;

void cast(void* dst, DType dst_dt, const void* src, DType src_dt, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  TRIPOD_DISPATCH_ACT(dst_dt, D, TRIPOD_DISPATCH_ACT(src_dt, S, {
    cast_forward_kernel<<<elementwise_grid(n, kBlock), kBlock, 0, stream>>>(
        static_cast<D*>(dst), static_cast<const S*>(src), n);
  }));
  TRIPOD_LAUNCH_CHECK();
}

void add(void* out, const void* a, const void* b, int64_t n, DType dt, cudaStream_t stream) {
  if (n == 0) return;
  TRIPOD_DISPATCH_ACT(dt, T, {
    if (packable<T>(n, out, a, b))
      add_forward_kernel_vec<<<elementwise_grid(n / kPack<T>, kBlock), kBlock, 0, stream>>>(
          static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n / kPack<T>);
    else
      add_forward_kernel<<<elementwise_grid(n, kBlock), kBlock, 0, stream>>>(
          static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n);
  });
  TRIPOD_LAUNCH_CHECK();
}

void scale(void* t, float s, int64_t n, DType dt, cudaStream_t stream) {
  if (n == 0) return;
  TRIPOD_DISPATCH_ACT(dt, T, scale_forward_kernel<<<elementwise_grid(n, kBlock), kBlock, 0, stream>>>(
      static_cast<T*>(t), s, n));
  TRIPOD_LAUNCH_CHECK();
}

void add_bias(void* out, const void* bias, int64_t N, int64_t OC, DType dt, cudaStream_t stream) {
  int64_t n = N * OC;
  if (n == 0) return;
  TRIPOD_DISPATCH_ACT(dt, T, add_bias_forward_kernel<<<elementwise_grid(n, kBlock), kBlock, 0, stream>>>(
      static_cast<T*>(out), static_cast<const T*>(bias), n, OC));
  TRIPOD_LAUNCH_CHECK();
}

void gelu_forward(void* out, const void* inp, int64_t n, DType dt, cudaStream_t stream) {
  if (n == 0) return;
  TRIPOD_DISPATCH_ACT(dt, T, {
    if (packable<T>(n, out, inp))
      gelu_forward_kernel_vec<<<elementwise_grid(n / kPack<T>, kBlock), kBlock, 0, stream>>>(
          static_cast<T*>(out), static_cast<const T*>(inp), n / kPack<T>);
    else
      gelu_forward_kernel<<<elementwise_grid(n, kBlock), kBlock, 0, stream>>>(
          static_cast<T*>(out), static_cast<const T*>(inp), n);
  });
  TRIPOD_LAUNCH_CHECK();
}

void gelu_backward(void* dinp, const void* inp, const void* dout, int64_t n, DType dt,
                   cudaStream_t stream) {
  if (n == 0) return;
  TRIPOD_DISPATCH_ACT(dt, T, {
    if (packable<T>(n, dinp, inp, dout))
      gelu_backward_kernel_vec<<<elementwise_grid(n / kPack<T>, kBlock), kBlock, 0, stream>>>(
          static_cast<T*>(dinp), static_cast<const T*>(inp), static_cast<const T*>(dout), n / kPack<T>);
    else
      gelu_backward_kernel<<<elementwise_grid(n, kBlock), kBlock, 0, stream>>>(
          static_cast<T*>(dinp), static_cast<const T*>(inp), static_cast<const T*>(dout), n);
  });
  TRIPOD_LAUNCH_CHECK();
}

void dropout_forward(void* out, const void* inp, int64_t n, float p, uint64_t seed,
                     uint64_t offset, DType dt, cudaStream_t stream) {
  if (n == 0) return;
  TRIPOD_DISPATCH_ACT(dt, T, dropout_forward_kernel<<<elementwise_grid(n, kBlock), kBlock, 0, stream>>>(
      static_cast<T*>(out), static_cast<const T*>(inp), n, p, seed, offset));
  TRIPOD_LAUNCH_CHECK();
}

}  // namespace tripod::backend::cuda
