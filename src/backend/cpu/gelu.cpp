// CPU reference: GELU, tanh approximation (GPT-2, Megatron's gelu_impl):
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// CUDA version: backend/cuda/gelu.cu.
#include <cmath>

#include "backend/cpu/kernels.h"

namespace tripod::backend::cpu {
namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;
}

template <typename T> void gelu_forward(T* out, const T* inp, int64_t n) {
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    const double x = inp[i];
    out[i] = static_cast<T>(0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x))));
  }
}

template <typename T> void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n) {
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    const double x = inp[i];
    const double u = kSqrt2OverPi * (x + 0.044715 * x * x * x);
    const double t = std::tanh(u);
    const double du = kSqrt2OverPi * (1.0 + 3.0 * 0.044715 * x * x);
    const double grad = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
    dinp[i] = static_cast<T>(grad * dout[i]);
  }
}

template void gelu_forward<float>(float*, const float*, int64_t);
template void gelu_forward<double>(double*, const double*, int64_t);
template void gelu_backward<float>(float*, const float*, const float*, int64_t);
template void gelu_backward<double>(double*, const double*, const double*, int64_t);

}  // namespace tripod::backend::cpu
