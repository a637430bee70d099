// CPU reference of FP8 block scaling (backend/ops.h fp8_block_cast,
// fp8_block_cast_tiles, fp8_block_matmul): the readable definition the CUDA
// kernels (backend/cuda/fp8_block.cu) match bit for bit. A block's amax is
// max |f32(v)| over its elements (NaN skipped, as fmax), its scale
// tensor/dtype.h's fp8_block_scale, each code f32_to_fp8(f32(v) * scale)
// (exact products: the scale is a power of two), its scale_inv 1 / scale.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/ops.h"
#include "tensor/dtype.h"

namespace tripod::backend::cpu {

namespace {

// One 1x128 block: the n values in[0], in[stride], ... cast into out[0],
// out[out_stride], ... with the block's scale; returns its scale_inv.
template <typename T>
float cast_block(uint8_t* out, int64_t out_stride, const T* in, int64_t stride, int64_t n, float mx, DType fp8) {
  float amax = 0.f;
  for (int64_t i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(static_cast<float>(in[i * stride])));
  const float s = fp8_block_scale(amax, mx);
  for (int64_t i = 0; i < n; ++i) out[i * out_stride] = f32_to_fp8(static_cast<float>(in[i * stride]) * s, fp8);
  return 1.f / s;
}

}  // namespace

// in (R, C): out (R, C) in 1x128 blocks along C, scale_inv [ceil(C/128)][R];
// out_t (C, R) in blocks of 128 rows of each column, scale_inv_t [ceil(R/128)][C].
template <typename T>
void fp8_block_cast(uint8_t* out, stat_t<T>* scale_inv, uint8_t* out_t, stat_t<T>* scale_inv_t, const T* in,
                    int64_t R, int64_t C, DType fp8) {
  const float mx = fp8_max(fp8);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c0 = 0; c0 < C; c0 += kFp8Block)
      scale_inv[(c0 / kFp8Block) * R + r] = static_cast<stat_t<T>>(
          cast_block(out + r * C + c0, 1, in + r * C + c0, 1, std::min(kFp8Block, C - c0), mx, fp8));
  if (!out_t) return;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t r0 = 0; r0 < R; r0 += kFp8Block)
      scale_inv_t[(r0 / kFp8Block) * C + c] = static_cast<stat_t<T>>(
          cast_block(out_t + c * R + r0, 1, in + r0 * C + c, C, std::min(kFp8Block, R - r0), mx, fp8));
}

// in (R, C) in 128x128 tiles: out (R, C), out_t (C, R) = the same codes
// transposed; scale_inv [ceil(R/128)][fp8_tile_ld(C)], scale_inv_t
// [ceil(C/128)][fp8_tile_ld(R)] (the padding entries 1).
template <typename T>
void fp8_block_cast_tiles(uint8_t* out, uint8_t* out_t, stat_t<T>* scale_inv, stat_t<T>* scale_inv_t, const T* in,
                          int64_t R, int64_t C, DType fp8) {
  const float mx = fp8_max(fp8);
  const int64_t ldc = fp8_tile_ld(C), ldr = fp8_tile_ld(R);
  std::fill(scale_inv, scale_inv + fp8_blocks(R) * ldc, stat_t<T>(1));
  std::fill(scale_inv_t, scale_inv_t + fp8_blocks(C) * ldr, stat_t<T>(1));
  for (int64_t r0 = 0; r0 < R; r0 += kFp8Block)
    for (int64_t c0 = 0; c0 < C; c0 += kFp8Block) {
      const int64_t r1 = std::min(R, r0 + kFp8Block), c1 = std::min(C, c0 + kFp8Block);
      float amax = 0.f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::fmax(amax, std::fabs(static_cast<float>(in[r * C + c])));
      const float s = fp8_block_scale(amax, mx);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) {
          const uint8_t q = f32_to_fp8(static_cast<float>(in[r * C + c]) * s, fp8);
          out[r * C + c] = q;
          out_t[c * R + r] = q;
        }
      const int64_t i = r0 / kFp8Block, j = c0 / kFp8Block;
      scale_inv[i * ldc + j] = scale_inv_t[j * ldr + i] = static_cast<stat_t<T>>(1.f / s);
    }
}

// out (N, OC) (=, or +=) a (N, K) @ b (OC, K)^T (+ bias): each code decoded
// exactly and times its block's scale_inv (exact in f64), the product
// through matmul_forward in f64, rounded once to T.
template <typename T>
void fp8_block_matmul(T* out, const uint8_t* a, DType a_fp8, const stat_t<T>* a_scale_inv, const uint8_t* b,
                      DType b_fp8, const stat_t<T>* b_scale_inv, bool b_tiles, const T* bias, bool accumulate,
                      int64_t N, int64_t K, int64_t OC) {
  auto table = [](DType fp8) {
    std::vector<double> t(256);
    for (int c = 0; c < 256; ++c) t[static_cast<size_t>(c)] = fp8_to_f32(static_cast<uint8_t>(c), fp8);
    return t;
  };
  const std::vector<double> ta = table(a_fp8), tb = table(b_fp8);
  std::vector<double> da(static_cast<size_t>(N * K)), db(static_cast<size_t>(OC * K));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      da[n * K + k] = ta[a[n * K + k]] * static_cast<double>(a_scale_inv[(k / kFp8Block) * N + n]);
  const int64_t ld = fp8_tile_ld(K);
  for (int64_t o = 0; o < OC; ++o)
    for (int64_t k = 0; k < K; ++k) {
      const stat_t<T> s = b_tiles ? b_scale_inv[(o / kFp8Block) * ld + k / kFp8Block]
                                  : b_scale_inv[(k / kFp8Block) * OC + o];
      db[o * K + k] = tb[b[o * K + k]] * static_cast<double>(s);
    }
  std::vector<double> p(static_cast<size_t>(N * OC));
  matmul_forward<double>(p.data(), da.data(), db.data(), nullptr, N, K, OC);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t o = 0; o < OC; ++o) {
      double v = p[i * OC + o];
      if (accumulate) v += out[i * OC + o];
      if (bias) v += bias[o];
      out[i * OC + o] = static_cast<T>(v);
    }
}

#define TRIPOD_FP8_BLOCK_INSTANTIATE(T)                                                                         \
  template void fp8_block_cast<T>(uint8_t*, stat_t<T>*, uint8_t*, stat_t<T>*, const T*, int64_t, int64_t, DType); \
  template void fp8_block_cast_tiles<T>(uint8_t*, uint8_t*, stat_t<T>*, stat_t<T>*, const T*, int64_t, int64_t,   \
                                        DType);                                                                 \
  template void fp8_block_matmul<T>(T*, const uint8_t*, DType, const stat_t<T>*, const uint8_t*, DType,          \
                                    const stat_t<T>*, bool, const T*, bool, int64_t, int64_t, int64_t);
TRIPOD_FP8_BLOCK_INSTANTIATE(float)
TRIPOD_FP8_BLOCK_INSTANTIATE(double)
#undef TRIPOD_FP8_BLOCK_INSTANTIATE

}  // namespace tripod::backend::cpu
