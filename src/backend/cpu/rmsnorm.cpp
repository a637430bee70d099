// CPU reference: RMSNorm forward/backward over the last dimension (Zhang &
// Sennrich 2019; Megatron --normalization RMSNorm). CUDA version:
// backend/cuda/rmsnorm.cu. rstd kept in stat_t (f32, f64 for the
// reference), sums accumulated in double.
#include <cmath>

#include "backend/cpu/kernels.h"

namespace tripod::backend::cpu {

// out (N,C) = x * rstd * w,  rstd (N) = 1 / sqrt(mean(x^2) + eps),  w (C)
template <typename T>
void rmsnorm_forward(T* out, stat_t<T>* rstd, const T* inp, const T* w, int64_t N, int64_t C, float eps) {
#pragma omp parallel for
  for (int64_t i = 0; i < N; ++i) {
    const T* x = inp + i * C;
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += static_cast<double>(x[c]) * x[c];
    const double s = 1.0 / std::sqrt(ss / static_cast<double>(C) + eps);
    T* o = out + i * C;
    for (int64_t c = 0; c < C; ++c) o[c] = static_cast<T>(x[c] * s * w[c]);
    rstd[i] = static_cast<stat_t<T>>(s);
  }
}

// dinp (N,C) +=, dw (C) +=
// With xhat = x * rstd and g = dout * w (no mean is subtracted, so the
// LayerNorm formula loses its mean(g) term):
//   dx = rstd * (g - xhat * mean(g * xhat)),  dw += sum over rows of dout * xhat
template <typename T>
void rmsnorm_backward(T* dinp, T* dw, const T* dout, const T* inp, const T* w, const stat_t<T>* rstd,
                      int64_t N, int64_t C) {
#pragma omp parallel for
  for (int64_t i = 0; i < N; ++i) {
    const T* x = inp + i * C;
    const T* d = dout + i * C;
    double gx_mean = 0;
    for (int64_t c = 0; c < C; ++c)
      gx_mean += static_cast<double>(d[c]) * w[c] * (static_cast<double>(x[c]) * rstd[i]);
    gx_mean /= static_cast<double>(C);
    T* dx = dinp + i * C;
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = x[c] * static_cast<double>(rstd[i]);
      const double g = static_cast<double>(d[c]) * w[c];
      dx[c] += static_cast<T>(rstd[i] * (g - xhat * gx_mean));
    }
  }
  // Parameter gradient: reduce over rows, one column per thread.
#pragma omp parallel for
  for (int64_t c = 0; c < C; ++c) {
    double sw = 0;
    for (int64_t i = 0; i < N; ++i)
      sw += static_cast<double>(dout[i * C + c]) * (inp[i * C + c] * static_cast<double>(rstd[i]));
    dw[c] += static_cast<T>(sw);
  }
}

template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int64_t, int64_t, float);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, int64_t, int64_t, float);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*, const float*,
                                      int64_t, int64_t);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*, const double*,
                                       const double*, int64_t, int64_t);

}  // namespace tripod::backend::cpu
