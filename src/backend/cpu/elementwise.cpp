// CPU reference: residual add, scaling, bias add, counter-based dropout.
// CUDA version: backend/cuda/elementwise.cu.
#include "backend/cpu/elementwise.h"

#include "backend/philox.h"

namespace tripod::backend::cpu {

template <typename T> void add(T* out, const T* a, const T* b, int64_t n) {
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
template <typename T> void scale(T* x, double s, int64_t n) {
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<T>(x[i] * s);
}
template <typename T> void add_bias(T* out, const T* bias, int64_t N, int64_t OC) {
#pragma omp parallel for
  for (int64_t i = 0; i < N; ++i)
    for (int64_t o = 0; o < OC; ++o) out[i * OC + o] += bias[o];
}
// keep element i iff uniform01(seed, offset + i) >= p; kept values scaled by 1/(1-p)
template <typename T>
void dropout(T* out, const T* inp, int64_t n, float p, uint64_t seed, uint64_t offset) {
  const double keep_scale = 1.0 / (1.0 - static_cast<double>(p));
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = uniform01(seed, offset + static_cast<uint64_t>(i)) >= p;
    out[i] = keep ? static_cast<T>(inp[i] * keep_scale) : T(0);
  }
}
template <typename T> double sum_squares(const T* x, int64_t n) {
  double s = 0;
#pragma omp parallel for reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

#define TRIPOD_INSTANTIATE(T)                                                   \
  template void add<T>(T*, const T*, const T*, int64_t);                        \
  template void scale<T>(T*, double, int64_t);                                  \
  template void add_bias<T>(T*, const T*, int64_t, int64_t);                    \
  template void dropout<T>(T*, const T*, int64_t, float, uint64_t, uint64_t);   \
  template double sum_squares<T>(const T*, int64_t);
TRIPOD_INSTANTIATE(float)
TRIPOD_INSTANTIATE(double)
#undef TRIPOD_INSTANTIATE

}  // namespace tripod::backend::cpu
