// CPU reference: LayerNorm forward/backward over the last dimension.
// CUDA version: backend/cuda/layernorm.cu. Statistics kept in stat_t (f32,
// f64 for the reference), sums accumulated in double.
#include <cmath>

#include "backend/cpu/kernels.h"

namespace tripod::backend::cpu {

// out (N,C), mean (N), rstd (N), inp (N,C), w (C), b (C)
template <typename T>
void layernorm_forward(T* out, stat_t<T>* mean, stat_t<T>* rstd, const T* inp, const T* w,
                       const T* b, int64_t N, int64_t C, float eps) {
#pragma omp parallel for
  for (int64_t i = 0; i < N; ++i) {
    const T* x = inp + i * C;
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += x[c];
    m /= static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
    v /= static_cast<double>(C);
    const double s = 1.0 / std::sqrt(v + eps);
    T* o = out + i * C;
    for (int64_t c = 0; c < C; ++c) o[c] = static_cast<T>((x[c] - m) * s * w[c] + b[c]);
    mean[i] = static_cast<stat_t<T>>(m);
    rstd[i] = static_cast<stat_t<T>>(s);
  }
}

// dinp (N,C) +=, dw (C) +=, db (C) +=
// With xhat = (x - mean) * rstd and g = dout * w:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
// out (N,C), when given: the forward's output xhat * w + b again (b given too).
template <typename T>
void layernorm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w,
                        const stat_t<T>* mean, const stat_t<T>* rstd, int64_t N, int64_t C, T* out,
                        const T* b) {
#pragma omp parallel for
  for (int64_t i = 0; i < N; ++i) {
    const T* x = inp + i * C;
    const T* d = dout + i * C;
    double g_mean = 0, gx_mean = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = (x[c] - mean[i]) * rstd[i];
      const double g = static_cast<double>(d[c]) * w[c];
      g_mean += g;
      gx_mean += g * xhat;
    }
    g_mean /= static_cast<double>(C);
    gx_mean /= static_cast<double>(C);
    T* dx = dinp + i * C;
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = (x[c] - mean[i]) * rstd[i];
      const double g = static_cast<double>(d[c]) * w[c];
      dx[c] += static_cast<T>(rstd[i] * (g - g_mean - xhat * gx_mean));
      if (out) out[i * C + c] = static_cast<T>(xhat * w[c] + b[c]);
    }
  }
  // Parameter gradients: reduce over rows, one column per thread.
#pragma omp parallel for
  for (int64_t c = 0; c < C; ++c) {
    double sw = 0, sb = 0;
    for (int64_t i = 0; i < N; ++i) {
      const double xhat = (inp[i * C + c] - mean[i]) * rstd[i];
      sw += static_cast<double>(dout[i * C + c]) * xhat;
      sb += dout[i * C + c];
    }
    dw[c] += static_cast<T>(sw);
    db[c] += static_cast<T>(sb);
  }
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*,
                                       const float*, int64_t, int64_t, float);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*,
                                        const double*, int64_t, int64_t, float);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, const float*, const float*, int64_t, int64_t,
                                        float*, const float*);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*,
                                         const double*, const double*, const double*, int64_t,
                                         int64_t,
                                         double*, const double*);

}  // namespace tripod::backend::cpu
