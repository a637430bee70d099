// SwiGLU forward and backward, elementwise over (N, F) with the gate and up
// halves of each inp row read side by side. CUDA version of backend/cpu's
// swiglu.cpp. A thread takes VW consecutive columns (16-byte loads and
// stores of gate, up, out / dout, dgate, dup when F and the pointers allow,
// VW = 1 otherwise); grid-stride. The math is swiglu_math.cuh's.
#include "backend/cuda/common.cuh"
#include "backend/cuda/swiglu.cuh"
#include "backend/cuda/swiglu_math.cuh"

namespace tripod::backend::cuda {

namespace {

template <typename T, int VW> struct alignas(sizeof(T) * VW) Vec {
  T v[VW];
};

template <typename T, int VW>
__global__ void swiglu_forward_kernel(T* out, const T* inp, int64_t N, int64_t F) {
  using V = Vec<T, VW>;
  const int64_t packs = F / VW, n = N * packs;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = e / packs, j0 = (e % packs) * VW;
    const V g = *reinterpret_cast<const V*>(inp + row * 2 * F + j0);
    const V u = *reinterpret_cast<const V*>(inp + row * 2 * F + F + j0);
    V y;
#pragma unroll
    for (int j = 0; j < VW; ++j) {
      y.v[j] = from_f<T>(swiglu_value(to_f(g.v[j]), to_f(u.v[j])));
    }
    *reinterpret_cast<V*>(out + row * F + j0) = y;
  }
}

template <typename T, int VW>
__global__ void swiglu_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t N, int64_t F) {
  using V = Vec<T, VW>;
  const int64_t packs = F / VW, n = N * packs;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = e / packs, j0 = (e % packs) * VW;
    const V g = *reinterpret_cast<const V*>(inp + row * 2 * F + j0);
    const V u = *reinterpret_cast<const V*>(inp + row * 2 * F + F + j0);
    const V d = *reinterpret_cast<const V*>(dout + row * F + j0);
    V dg, du;
#pragma unroll
    for (int j = 0; j < VW; ++j) {
      const float x = to_f(g.v[j]), up = to_f(u.v[j]), dy = to_f(d.v[j]);
      float fg, fu;
      swiglu_grads(x, up, dy, fg, fu);
      dg.v[j] = from_f<T>(fg);
      du.v[j] = from_f<T>(fu);
    }
    *reinterpret_cast<V*>(dinp + row * 2 * F + j0) = dg;
    *reinterpret_cast<V*>(dinp + row * 2 * F + F + j0) = du;
  }
}

constexpr int kBlock = 256;

}  // namespace

void swiglu_forward(void* out, const void* inp, int64_t N, int64_t F, DType dt, cudaStream_t stream) {
  if (N * F == 0) return;
  TRIPOD_DISPATCH_ACT(dt, T, {
    if (packable<T>(F, out, inp))
      swiglu_forward_kernel<T, kPack<T>><<<elementwise_grid(N * F / kPack<T>, kBlock), kBlock, 0, stream>>>(
          static_cast<T*>(out), static_cast<const T*>(inp), N, F);
    else
      swiglu_forward_kernel<T, 1><<<elementwise_grid(N * F, kBlock), kBlock, 0, stream>>>(
          static_cast<T*>(out), static_cast<const T*>(inp), N, F);
  });
  TRIPOD_LAUNCH_CHECK();
}

void swiglu_backward(void* dinp, const void* inp, const void* dout, int64_t N, int64_t F, DType dt,
                     cudaStream_t stream) {
  if (N * F == 0) return;
  TRIPOD_DISPATCH_ACT(dt, T, {
    if (packable<T>(F, dinp, inp, dout))
      swiglu_backward_kernel<T, kPack<T>><<<elementwise_grid(N * F / kPack<T>, kBlock), kBlock, 0, stream>>>(
          static_cast<T*>(dinp), static_cast<const T*>(inp), static_cast<const T*>(dout), N, F);
    else
      swiglu_backward_kernel<T, 1><<<elementwise_grid(N * F, kBlock), kBlock, 0, stream>>>(
          static_cast<T*>(dinp), static_cast<const T*>(inp), static_cast<const T*>(dout), N, F);
  });
  TRIPOD_LAUNCH_CHECK();
}

}  // namespace tripod::backend::cuda
