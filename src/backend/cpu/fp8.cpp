// CPU reference of the FP8 ops (backend/ops.h). The conversions are
// tensor/dtype.h's f32_to_fp8 / fp8_to_f32; every product that feeds a
// conversion is taken in f32, as the CUDA kernels take it, so the two agree
// bit for bit. f64 tensors (the reference path of tests/backend_ops) hold
// f32 values and are read as f32.
// CUDA version: backend/cuda/fp8.cu (casts), fp8_matmul.cpp (cuBLASLt).
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/kernels.h"
#include "tensor/dtype.h"

namespace tripod::backend::cpu {

// in(R, C): out(R, C) = fp8(f32(in) * scale); out_t(C, R) = its transpose
// when given; amax = max(amax, max |f32(in)|), NaN skipped (fmax).
template <typename T>
void fp8_cast_transpose(uint8_t* out, uint8_t* out_t, stat_t<T>* amax, const T* in, stat_t<T> scale,
                        int64_t R, int64_t C, DType fp8) {
  const float s = static_cast<float>(scale);
  float m = static_cast<float>(*amax);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const float x = static_cast<float>(in[r * C + c]);
      m = std::fmax(m, std::fabs(x));
      const uint8_t q = f32_to_fp8(x * s, fp8);
      out[r * C + c] = q;
      if (out_t) out_t[c * R + r] = q;
    }
  *amax = static_cast<stat_t<T>>(m);
}

// out(n) = f32(in) * scale_inv (in f32), rounded to T.
template <typename T>
void fp8_dequantize(T* out, const uint8_t* in, stat_t<T> scale_inv, int64_t n, DType fp8) {
  const float s = static_cast<float>(scale_inv);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(fp8_to_f32(in[i], fp8) * s);
}

// out(N, OC) (=, or += with accumulate) (a(N, K) * sa) @ (b(OC, K) * sb)^T (+ bias):
// the operands decoded exactly to f64, the product through matmul_forward
// in f64, scaled by sa * sb in f64 and rounded once to T.
template <typename T>
void fp8_matmul(T* out, const uint8_t* a, DType a_fp8, stat_t<T> a_scale_inv, const uint8_t* b, DType b_fp8,
                stat_t<T> b_scale_inv, const T* bias, bool accumulate, int64_t N, int64_t K, int64_t OC) {
  auto decode = [K](const uint8_t* q, DType fp8, int64_t rows) {
    double table[256];  // every code decoded once (fp8_to_f32 is exact)
    for (int c = 0; c < 256; ++c) table[c] = fp8_to_f32(static_cast<uint8_t>(c), fp8);
    std::vector<double> v(static_cast<size_t>(rows * K));
    for (size_t i = 0; i < v.size(); ++i) v[i] = table[q[i]];
    return v;
  };
  const std::vector<double> da = decode(a, a_fp8, N), db = decode(b, b_fp8, OC);
  std::vector<double> p(static_cast<size_t>(N * OC));
  matmul_forward<double>(p.data(), da.data(), db.data(), nullptr, N, K, OC);
  const double s = static_cast<double>(a_scale_inv) * static_cast<double>(b_scale_inv);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t o = 0; o < OC; ++o) {
      double v = p[i * OC + o] * s;
      if (accumulate) v += out[i * OC + o];
      if (bias) v += bias[o];
      out[i * OC + o] = static_cast<T>(v);
    }
}

// The scaling update of M tensors (backend/ops.h fp8_update_scale), in f32
// as the CUDA kernel computes it: (fp8_max / a) * 2^-margin, each step
// correctly rounded.
template <typename S>
void fp8_update_scale(S* scale, S* scale_inv, S* history, const S* amax, int64_t M, int64_t H, float fp8_max,
                      int margin, bool use_max) {
  const float margin_scale = std::ldexp(1.0f, -margin);
  for (int64_t m = 0; m < M; ++m) {
    float a = static_cast<float>(amax[m]);
    if (history) {
      S* row = history + m * H;
      for (int64_t h = H - 1; h > 0; --h) row[h] = row[h - 1];
      row[0] = amax[m];
      if (use_max)
        for (int64_t h = 1; h < H; ++h) a = std::fmax(a, static_cast<float>(row[h]));
    }
    float sc = history ? static_cast<float>(scale[m]) : 1.0f;  // kept when a is 0 or not finite
    if (a > 0.0f && std::isfinite(a)) {
      sc = (fp8_max / a) * margin_scale;
      if (std::isinf(sc)) sc = std::numeric_limits<float>::max();
    }
    scale[m] = static_cast<S>(sc);
    scale_inv[m] = static_cast<S>(1.0f / sc);
  }
}
template void fp8_update_scale<float>(float*, float*, float*, const float*, int64_t, int64_t, float, int, bool);
template void fp8_update_scale<double>(double*, double*, double*, const double*, int64_t, int64_t, float, int,
                                       bool);

#define TRIPOD_FP8_INSTANTIATE(T)                                                                           \
  template void fp8_cast_transpose<T>(uint8_t*, uint8_t*, stat_t<T>*, const T*, stat_t<T>, int64_t, int64_t, \
                                      DType);                                                               \
  template void fp8_dequantize<T>(T*, const uint8_t*, stat_t<T>, int64_t, DType);                           \
  template void fp8_matmul<T>(T*, const uint8_t*, DType, stat_t<T>, const uint8_t*, DType, stat_t<T>,       \
                              const T*, bool, int64_t, int64_t, int64_t);
TRIPOD_FP8_INSTANTIATE(float)
TRIPOD_FP8_INSTANTIATE(double)
#undef TRIPOD_FP8_INSTANTIATE

}  // namespace tripod::backend::cpu
