// Fused AdamW (Loshchilov & Hutter, decoupled weight decay) on f32 master
// weights: reads p, g, m, v and writes p, m, v once each (28 bytes/param),
// so it runs at memory bandwidth. With a compute copy it also writes the
// updated p as bf16/f16 (30 bytes/param instead of 28 + a 6-byte cast pass).
// CUDA version of backend/cpu's adamw_update.
#include <type_traits>

#include "backend/cuda/adamw.cuh"
#include "backend/cuda/common.cuh"

namespace tripod::backend::cuda {

// ---- kernels ----

__device__ __forceinline__ void adamw_element(float& p, float g, float& m, float& v,
                                               const AdamWArgs& a) {
  g *= a.grad_scale;
  m = a.beta1 * m + (1.f - a.beta1) * g;
  v = a.beta2 * v + (1.f - a.beta2) * g * g;
  float mhat = m / a.bias_correction1, vhat = v / a.bias_correction2;
  p -= a.lr * (mhat / (sqrtf(vhat) + a.eps) + a.weight_decay * p);
}

// C: the compute copy's type (bf16, f16), or void for none. One kernel body
// for both, so the fused update computes exactly the unfused p; the copy is
// from_f<C>(p), as cast_forward_kernel (elementwise.cu) converts.
template <typename C>
__global__ void adamw_update_kernel(float* param, const float* grad, float* m, float* v, C* compute,
                                    int64_t n, AdamWArgs a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    adamw_element(param[i], grad[i], m[i], v[i], a);
    if constexpr (!std::is_void_v<C>) compute[i] = from_f<C>(param[i]);
  }
}

// Four compute-copy elements: one 8-byte store next to the 16-byte f32 packs.
template <typename C> struct alignas(8) Quad {
  C v[4];
};

// 16-byte packs of the four f32 streams (n a multiple of 4, 16-byte aligned
// pointers, the compute copy 8-byte aligned), grid-stride.
template <typename C>
__global__ void adamw_update_kernel_vec(float* param, const float* grad, float* m, float* v, C* compute,
                                        int64_t npacks, AdamWArgs a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < npacks;
       i += int64_t(gridDim.x) * blockDim.x) {
    Pack<float> p = load_pack(param + 4 * i), g = load_pack(grad + 4 * i);
    Pack<float> mm = load_pack(m + 4 * i), vv = load_pack(v + 4 * i);
#pragma unroll
    for (int k = 0; k < 4; ++k) adamw_element(p.v[k], g.v[k], mm.v[k], vv.v[k], a);
    store_pack(param + 4 * i, p);
    store_pack(m + 4 * i, mm);
    store_pack(v + 4 * i, vv);
    if constexpr (!std::is_void_v<C>) {
      Quad<C> c;
#pragma unroll
      for (int k = 0; k < 4; ++k) c.v[k] = from_f<C>(p.v[k]);
      *reinterpret_cast<Quad<C>*>(compute + 4 * i) = c;
    }
  }
}

template <typename C>
void launch(float* param, const float* grad, float* m, float* v, C* compute, int64_t n, const AdamWArgs& args,
            cudaStream_t stream) {
  constexpr int kBlock = 256;
  const bool compute_ok = std::is_void_v<C> || reinterpret_cast<uintptr_t>(compute) % 8 == 0;
  if (packable<float>(n, param, grad, m, v) && compute_ok)
    adamw_update_kernel_vec<C><<<elementwise_grid(n / 4, kBlock), kBlock, 0, stream>>>(param, grad, m, v,
                                                                                       compute, n / 4, args);
  else
    adamw_update_kernel<C><<<elementwise_grid(n, kBlock), kBlock, 0, stream>>>(param, grad, m, v, compute, n,
                                                                               args);
  TRIPOD_LAUNCH_CHECK();
}

// ---- launchers ----

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWArgs& args, cudaStream_t stream) {
  if (n == 0) return;
  launch<void>(param, grad, m, v, nullptr, n, args, stream);
}

void adamw_update_cast(float* param, const float* grad, float* m, float* v, void* compute,
                       DType compute_dt, int64_t n, const AdamWArgs& args, cudaStream_t stream) {
  if (n == 0) return;
  if (compute_dt == DType::BF16)
    launch(param, grad, m, v, static_cast<bf16*>(compute), n, args, stream);
  else if (compute_dt == DType::F16)
    launch(param, grad, m, v, static_cast<f16*>(compute), n, args, stream);
  else
    fail_dtype(compute_dt);
}

}  // namespace tripod::backend::cuda
