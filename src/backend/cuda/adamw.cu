// Fused AdamW (Loshchilov & Hutter, decoupled weight decay) on f32 master
// weights: reads p, g, m, v and writes p, m, v once each (28 bytes/param),
// so it runs at memory bandwidth. CUDA version of backend/cpu's adamw_update.
#include "backend/cuda/adamw.cuh"
#include "backend/cuda/common.cuh"

namespace tripod::backend::cuda {

// ---- kernels ----

__global__ void adamw_update_kernel(float* param, const float* grad, float* m, float* v,
                                    int64_t n, AdamWArgs a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float g = grad[i] * a.grad_scale;
    float mi = a.beta1 * m[i] + (1.f - a.beta1) * g;
    float vi = a.beta2 * v[i] + (1.f - a.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi / a.bias_correction1, vhat = vi / a.bias_correction2;
    float p = param[i];
    param[i] = p - a.lr * (mhat / (sqrtf(vhat) + a.eps) + a.weight_decay * p);
  }
}

// ---- launchers ----

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWArgs& args, cudaStream_t stream) {
  if (n == 0) return;
  adamw_update_kernel<<<elementwise_grid(n, 256), 256, 0, stream>>>(param, grad, m, v, n, args);
  TRIPOD_LAUNCH_CHECK();
}

}  // namespace tripod::backend::cuda
