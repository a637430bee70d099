// CPU reference: SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer";
// Megatron --swiglu). inp (N, 2F) = [gate | up] per row (Megatron's
// torch.chunk order); out (N, F). CUDA version: backend/cuda/swiglu.cu.
//   silu(g) = g * sigmoid(g),  out = silu(gate) * up
//   dgate = dout * up * sigmoid(g) * (1 + g * (1 - sigmoid(g))),  dup = dout * silu(g)
#include <cmath>

#include "backend/cpu/kernels.h"

namespace tripod::backend::cpu {

template <typename T> void swiglu_forward(T* out, const T* inp, int64_t N, int64_t F) {
#pragma omp parallel for
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < F; ++j) {
      const double g = inp[i * 2 * F + j], u = inp[i * 2 * F + F + j];
      out[i * F + j] = static_cast<T>(g / (1.0 + std::exp(-g)) * u);
    }
}

template <typename T> void swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t N, int64_t F) {
#pragma omp parallel for
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < F; ++j) {
      const double g = inp[i * 2 * F + j], u = inp[i * 2 * F + F + j], d = dout[i * F + j];
      const double sig = 1.0 / (1.0 + std::exp(-g));
      dinp[i * 2 * F + j] = static_cast<T>(d * u * sig * (1.0 + g * (1.0 - sig)));
      dinp[i * 2 * F + F + j] = static_cast<T>(d * g * sig);
    }
}

template void swiglu_forward<float>(float*, const float*, int64_t, int64_t);
template void swiglu_forward<double>(double*, const double*, int64_t, int64_t);
template void swiglu_backward<float>(float*, const float*, const float*, int64_t, int64_t);
template void swiglu_backward<double>(double*, const double*, const double*, int64_t, int64_t);

}  // namespace tripod::backend::cpu
