// Fused AdamW (Loshchilov & Hutter, decoupled weight decay) on f32 master
// weights: reads p, g, m, v and writes p, m, v once each (28 bytes/param),
// so it runs at memory bandwidth. CUDA version of backend/cpu's adamw_update.
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

__global__ void adamw_update_kernel(float* param, const float* grad, float* m, float* v,
                                    int64_t n, AdamWArgs a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    adamw_element(param[i], grad[i], m[i], v[i], a);
}

// 16-byte packs of the four streams (n a multiple of 4, aligned pointers).
__global__ void adamw_update_kernel_vec(float* param, const float* grad, float* m, float* v,
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
  }
}

// ---- launchers ----

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWArgs& args, cudaStream_t stream) {
  if (n == 0) return;
  if (packable<float>(n, param, grad, m, v))
    adamw_update_kernel_vec<<<elementwise_grid(n / 4, 256), 256, 0, stream>>>(param, grad, m, v,
                                                                             n / 4, args);
  else
    adamw_update_kernel<<<elementwise_grid(n, 256), 256, 0, stream>>>(param, grad, m, v, n, args);
  TRIPOD_LAUNCH_CHECK();
}

}  // namespace tripod::backend::cuda
