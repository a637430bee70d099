// CPU reference: AdamW with decoupled weight decay, as torch.optim.AdamW and
// Megatron (apex FusedAdam, adam_w_mode=True):
//   g = grad * grad_scale
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd * p )
// CUDA version: backend/cuda/adamw.cu.
#include <cmath>

#include "backend/cpu/kernels.h"

namespace tripod::backend::cpu {

template <typename T>
void adamw_update(T* p, const T* g, T* m, T* v, int64_t n, float lr, float b1, float b2,
                  float eps, float wd, int64_t step, float grad_scale) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(b1), static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(b2), static_cast<double>(step));
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    const double gi = static_cast<double>(g[i]) * grad_scale;
    const double mi = b1 * static_cast<double>(m[i]) + (1.0 - b1) * gi;
    const double vi = b2 * static_cast<double>(v[i]) + (1.0 - b2) * gi * gi;
    m[i] = static_cast<T>(mi);
    v[i] = static_cast<T>(vi);
    const double update = (mi / bc1) / (std::sqrt(vi / bc2) + eps) + wd * static_cast<double>(p[i]);
    p[i] = static_cast<T>(p[i] - lr * update);
  }
}

template void adamw_update<float>(float*, const float*, float*, float*, int64_t, float, float,
                                  float, float, float, int64_t, float);
template void adamw_update<double>(double*, const double*, double*, double*, int64_t, float, float,
                                   float, float, float, int64_t, float);

}  // namespace tripod::backend::cpu
