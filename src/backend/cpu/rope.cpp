// CPU reference: rotary position embedding (Su et al. 2021, RoFormer), the
// rotate-half convention of GPT-NeoX, Megatron-core and Hugging Face Llama,
// in place on the Q and K heads of qkv. CUDA version: backend/cuda/rope.cu.
//
// For row (b, t) and each Q/K head x (HS wide): r = rot_dim, h = r/2,
//   theta_i = base^(-2i/r),  angle_i = pos_t * theta_i   (in double; pos_t = t
//   unless positions are given),
//   c_i, s_i = cos, sin(angle_i) rounded to stat_t (f32; f64 for the reference),
//   x[i]   <- x[i] c_i - x[i+h] s_i
//   x[i+h] <- x[i+h] c_i + x[i] s_i      for i < h; x[r..HS) untouched.
// The backward applies the transpose (s_i -> -s_i): a rotation's inverse.
#include <cmath>
#include <vector>

#include "backend/cpu/kernels.h"

namespace tripod::backend::cpu {

template <typename T>
void rope(T* qkv, int64_t B, int64_t Tn, int64_t NH, int64_t G, int64_t HS, int64_t rot_dim, float base,
          bool backward, const int32_t* pos) {
  using S = stat_t<T>;
  const int64_t W = (NH + 2 * G) * HS, h = rot_dim / 2;
  // Table of (cos, sin) per (t, i), the same for every head and batch row.
  std::vector<S> cs(static_cast<size_t>(Tn * h)), sn(cs.size());
  for (int64_t t = 0; t < Tn; ++t)
    for (int64_t i = 0; i < h; ++i) {
      const double theta = std::pow(static_cast<double>(base),
                                    -2.0 * static_cast<double>(i) / static_cast<double>(rot_dim));
      const double angle = static_cast<double>(pos ? pos[t] : t) * theta;
      cs[t * h + i] = static_cast<S>(std::cos(angle));
      sn[t * h + i] = static_cast<S>(backward ? -std::sin(angle) : std::sin(angle));
    }
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tn; ++t) {
      const S* c = cs.data() + t * h;
      const S* s = sn.data() + t * h;
      T* row = qkv + (b * Tn + t) * W;
      for (int64_t head = 0; head < NH + G; ++head) {  // Q heads then K heads: contiguous
        T* x = row + head * HS;
        for (int64_t i = 0; i < h; ++i) {
          const double x1 = x[i], x2 = x[i + h];
          x[i] = static_cast<T>(x1 * c[i] - x2 * s[i]);
          x[i + h] = static_cast<T>(x2 * c[i] + x1 * s[i]);
        }
      }
    }
}

template void rope<float>(float*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, bool,
                          const int32_t*);
template void rope<double>(double*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, bool,
                           const int32_t*);

}  // namespace tripod::backend::cpu
