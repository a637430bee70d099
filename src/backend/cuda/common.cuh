// Device helpers shared by the kernels of backend/cuda: conversions between
// the activation types (f32, bf16, f16) and float, warp/block reductions, and
// the dtype dispatch used by every launcher. Launchers take untyped pointers
// plus a DType so the .cuh headers stay free of templates.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "tensor/dtype.h"

namespace tripod::backend::cuda {

using bf16 = __nv_bfloat16;
using f16 = __half;

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f(f16 x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 from_f<bf16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ f16 from_f<f16>(float x) { return __float2half_rn(x); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread
// gets the result. `shared` holds >= 32 floats; safe to call repeatedly.
__device__ __forceinline__ float block_sum(float v, float* shared) {
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // previous use of `shared` is finished
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < nwarps ? shared[lane] : 0.f;
  return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float* shared) {
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < nwarps ? shared[lane] : -INFINITY;
  return warp_max(v);
}

// 16-byte packs: 8 bf16/f16 or 4 f32 per load/store (one 128-bit access per
// thread; memory-bound kernels need these to approach DRAM bandwidth).
template <typename T> constexpr int kPack = 16 / static_cast<int>(sizeof(T));
template <typename T> struct alignas(16) Pack {
  T v[kPack<T>];
};
template <typename T> __device__ __forceinline__ Pack<T> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T>*>(p);
}
template <typename T> __device__ __forceinline__ void store_pack(T* p, const Pack<T>& x) {
  *reinterpret_cast<Pack<T>*>(p) = x;
}
// True when every pointer is 16-byte aligned and n splits into whole packs.
template <typename T, typename... P> inline bool packable(int64_t n, P... ptrs) {
  return n % kPack<T> == 0 && ((reinterpret_cast<uintptr_t>(ptrs) % 16 == 0) && ...);
}

// True when p is a multiple of `bytes` (the vector width of a load or store).
inline bool aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Grid size for grid-stride elementwise kernels: enough blocks to fill the
// chip several times over, never more than the work needs.
inline unsigned elementwise_grid(int64_t n, int block) {
  int64_t g = ceil_div(n, block);
  if (g > 132 * 32) g = 132 * 32;
  return static_cast<unsigned>(g < 1 ? 1 : g);
}

}  // namespace tripod::backend::cuda

// TRIPOD_DISPATCH_ACT(dtype, T, body): run body with T = float, bf16 or f16.
#define TRIPOD_DISPATCH_ACT(dtype, T, ...)                                              \
  do {                                                                                  \
    switch (dtype) {                                                                    \
      case ::tripod::DType::F32: { using T = float; __VA_ARGS__; break; }                \
      case ::tripod::DType::BF16: { using T = ::tripod::backend::cuda::bf16; __VA_ARGS__; break; } \
      case ::tripod::DType::F16: { using T = ::tripod::backend::cuda::f16; __VA_ARGS__; break; }   \
      default: ::tripod::backend::cuda::fail_dtype(dtype);                              \
    }                                                                                   \
  } while (0)

#define TRIPOD_LAUNCH_CHECK() TRIPOD_CUDA_CHECK(cudaGetLastError())
