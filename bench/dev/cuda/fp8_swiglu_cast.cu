// The MLP's SwiGLU computed inside the FP8 cast + transpose: the variants
// of the product's kernel (src/backend/cuda/fp8_swiglu.cu, NOTE [FP8 SwiGLU
// casts]), in the llm.c dev/cuda manner. main checks each against the
// unfused sequence (swiglu_forward / swiglu_backward, then
// fp8_cast_transpose: every code, transposed code and amax bit for bit) and
// times it next to that sequence and the shipped kernel. Built only by the
// bench_dev target.
//
// Variant 0 (v1, row by row: a thread loads a row of its 8 x 8 sub-tile,
// computes it, casts it, then the next row) moves half the bytes of the
// unfused pair yet was slower (H200, R 8192, F 14336: forward 0.37 ms
// against 0.18 + 0.12, backward 0.88 against 0.29 + 0.26): its loads are
// not in flight together. Variants 1-7 (v2) issue all of a sub-tile's loads
// first, and the backward computes d gate and d up together; they differ
// in the tile and the blocks per SM. On an H100 (bench/RESULTS.md,
// 2026-12-05) v2 took 252 us forward against 412 unfused and 523 us
// backward against 740 with 16 x 8 threads and 2 blocks per SM (variant 3,
// shipped); forcing 4 or more blocks per SM spills and the backward drops
// to 0.8x the unfused pair. In a training step the shipped backward took
// 0.63 ms per call (CUPTI), about 56% of the H100's bandwidth for its 10
// bytes per (row, column): variants 8-17 (v3: 8, 4 or 2 rows per thread,
// the sigmoid through __frcp_rn) are the next candidates, not yet timed.
//
//   cmake --build build --target bench_dev
//   build/bench/dev/fp8_swiglu_cast [R F]   (default 8192 14336, bf16; E4M3 forward, E5M2 backward)
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/fp8_math.cuh"
#include "backend/cuda/swiglu_math.cuh"

namespace tripod::backend::cuda {
namespace {

__device__ __forceinline__ float swiglu_dgate(float x, float up, float dy) {
  float dg, du;
  swiglu_grads(x, up, dy, dg, du);
  return dg;
}
__device__ __forceinline__ float swiglu_dup(float x, float dy) {
  float dg, du;
  swiglu_grads(x, 0.f, dy, dg, du);
  return du;
}

// The MLP's SwiGLU computed inside the cast + transpose (delayed scaling
// knows the scale before the tensor exists): the tile loop of
// cast_transpose_kernel with the 8 values of a row chunk computed from
// fc1's output (forward: silu(gate) * up; backward: d gate or d up from
// gate, up and d act) instead of loaded. Each value is rounded to the
// compute dtype T first, as swiglu_forward / swiglu_backward store it, so
// the codes equal fp8_cast_transpose of the unfused SwiGLU bit for bit;
// the (R, F) activation (forward) and the (R, 2F) gradient (backward) are
// neither written nor read again. Needs R and F multiples of 8 and 16-byte
// aligned rows.
template <typename T>
struct SwigluSource {  // out (R, F) from inp (R, 2F)
  const T* inp;
  int64_t F;
  __device__ __forceinline__ void load8(int64_t r, int64_t c, float f[8]) const {
    struct alignas(16) In8 { T v[8]; };
    const In8 g = *reinterpret_cast<const In8*>(inp + r * 2 * F + c);
    const In8 u = *reinterpret_cast<const In8*>(inp + r * 2 * F + F + c);
#pragma unroll
    for (int j = 0; j < 8; ++j) f[j] = to_f(from_f<T>(swiglu_value(to_f(g.v[j]), to_f(u.v[j]))));
  }
};
template <typename T>
struct SwigluGradSource {  // out (R, 2F) = [d gate | d up] from inp (R, 2F) and dout (R, F)
  const T* inp;
  const T* dout;
  int64_t F;
  __device__ __forceinline__ void load8(int64_t r, int64_t c, float f[8]) const {
    struct alignas(16) In8 { T v[8]; };
    const bool up_half = c >= F;
    const int64_t k = up_half ? c - F : c;
    const In8 g = *reinterpret_cast<const In8*>(inp + r * 2 * F + k);
    const In8 d = *reinterpret_cast<const In8*>(dout + r * F + k);
    if (up_half) {
#pragma unroll
      for (int j = 0; j < 8; ++j) f[j] = to_f(from_f<T>(swiglu_dup(to_f(g.v[j]), to_f(d.v[j]))));
    } else {
      const In8 u = *reinterpret_cast<const In8*>(inp + r * 2 * F + F + k);
#pragma unroll
      for (int j = 0; j < 8; ++j) f[j] = to_f(from_f<T>(swiglu_dgate(to_f(g.v[j]), to_f(u.v[j]), to_f(d.v[j]))));
    }
  }
};

template <typename Src, bool kE5M2, int kTx, int kTy>
__global__ void __launch_bounds__(kTx * kTy)
    cast_transpose_src_kernel(uint8_t* out, uint8_t* out_t, float* amax, Src src, const float* scale, int64_t R,
                              int64_t C) {
  static_assert((kTy & (kTy - 1)) == 0, "the swizzle needs a power-of-two kTy");
  constexpr int kRows = 8 * kTy, kCols = 8 * kTx;
  __shared__ uint2 tile_t[kCols][kTy];
  const float s = *scale;
  const int tx = threadIdx.x % kTx, ty = threadIdx.x / kTx;
  const int64_t c0 = int64_t(blockIdx.x) * kCols, row_tiles = (R + kRows - 1) / kRows;
  float m = 0.f;
  for (int64_t tr = blockIdx.y; tr < row_tiles; tr += gridDim.y) {
    const int64_t r0 = tr * kRows, r = r0 + 8 * ty, c = c0 + 8 * tx;
    if (r < R && c < C) {
      uint32_t t[8][2] = {};
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        float f[8];
        src.load8(r + i, c, f);
        uint32_t q[2] = {0u, 0u};
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          m = fmaxf(m, fabsf(f[j]));
          const uint32_t b = to_fp8<kE5M2>(f[j] * s);
          q[j / 4] |= b << (8 * (j % 4));
          t[j][i / 4] |= b << (8 * (i % 4));
        }
        *reinterpret_cast<uint2*>(out + (r + i) * C + c) = make_uint2(q[0], q[1]);
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) tile_t[8 * tx + j][ty ^ (tx % kTy)] = make_uint2(t[j][0], t[j][1]);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kCols * kTy; i += kTx * kTy) {
      const int cc = i / kTy, k = i % kTy;
      const int64_t ct = c0 + cc, rt = r0 + 8 * k;
      if (ct < C && rt < R) *reinterpret_cast<uint2*>(out_t + ct * R + rt) = tile_t[cc][k ^ ((cc / 8) % kTy)];
    }
    __syncthreads();
  }
  commit_amax(m, amax);
}

// v2 ("prefetch"): the same tile and codes, but every load of a thread's
// 8 x 8 sub-tile is issued before any value is computed (8 rows of gate and
// up forward; of gate, up and d act backward), and the backward thread
// computes d gate and d up of one column chunk together (each input read
// once: 6 bytes per (row, column) in, 4 bytes of codes out, against 18
// bytes of the unfused pair). kMinBlocks bounds the registers so that
// several blocks share an SM and one block's loads overlap another's math.
template <typename T, bool kE5M2, int kTx, int kTy, int kMinBlocks>
__global__ void __launch_bounds__(kTx * kTy, kMinBlocks)
    swiglu_cast_v2_kernel(uint8_t* out, uint8_t* out_t, float* amax, const T* inp, const float* scale, int64_t R,
                          int64_t F) {
  static_assert((kTy & (kTy - 1)) == 0, "the swizzle needs a power-of-two kTy");
  constexpr int kRows = 8 * kTy, kCols = 8 * kTx;
  struct alignas(16) In8 { T v[8]; };
  __shared__ uint2 tile_t[kCols][kTy];
  const float s = *scale;
  const int tx = threadIdx.x % kTx, ty = threadIdx.x / kTx;
  const int64_t c0 = int64_t(blockIdx.x) * kCols, row_tiles = (R + kRows - 1) / kRows;
  float m = 0.f;
  for (int64_t tr = blockIdx.y; tr < row_tiles; tr += gridDim.y) {
    const int64_t r0 = tr * kRows, r = r0 + 8 * ty, c = c0 + 8 * tx;
    if (r < R && c < F) {
      In8 g[8], u[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        g[i] = *reinterpret_cast<const In8*>(inp + (r + i) * 2 * F + c);
        u[i] = *reinterpret_cast<const In8*>(inp + (r + i) * 2 * F + F + c);
      }
      uint32_t t[8][2] = {};
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        uint32_t q[2] = {0u, 0u};
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float f = to_f(from_f<T>(swiglu_value(to_f(g[i].v[j]), to_f(u[i].v[j]))));
          m = fmaxf(m, fabsf(f));
          const uint32_t b = to_fp8<kE5M2>(f * s);
          q[j / 4] |= b << (8 * (j % 4));
          t[j][i / 4] |= b << (8 * (i % 4));
        }
        *reinterpret_cast<uint2*>(out + (r + i) * F + c) = make_uint2(q[0], q[1]);
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) tile_t[8 * tx + j][ty ^ (tx % kTy)] = make_uint2(t[j][0], t[j][1]);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kCols * kTy; i += kTx * kTy) {
      const int cc = i / kTy, k = i % kTy;
      const int64_t ct = c0 + cc, rt = r0 + 8 * k;
      if (ct < F && rt < R) *reinterpret_cast<uint2*>(out_t + ct * R + rt) = tile_t[cc][k ^ ((cc / 8) % kTy)];
    }
    __syncthreads();
  }
  commit_amax(m, amax);
}

// Backward: out (R, 2F) = [d gate | d up], out_t (2F, R); a block takes
// columns [c0, c0 + kCols) of both halves.
template <typename T, bool kE5M2, int kTx, int kTy, int kMinBlocks>
__global__ void __launch_bounds__(kTx * kTy, kMinBlocks)
    swiglu_backward_cast_v2_kernel(uint8_t* out, uint8_t* out_t, float* amax, const T* inp, const T* dout,
                                   const float* scale, int64_t R, int64_t F) {
  static_assert((kTy & (kTy - 1)) == 0, "the swizzle needs a power-of-two kTy");
  constexpr int kRows = 8 * kTy, kCols = 8 * kTx;
  struct alignas(16) In8 { T v[8]; };
  __shared__ uint2 tile_t[2][kCols][kTy];
  const float s = *scale;
  const int tx = threadIdx.x % kTx, ty = threadIdx.x / kTx;
  const int64_t c0 = int64_t(blockIdx.x) * kCols, row_tiles = (R + kRows - 1) / kRows, W = 2 * F;
  float m = 0.f;
  for (int64_t tr = blockIdx.y; tr < row_tiles; tr += gridDim.y) {
    const int64_t r0 = tr * kRows, r = r0 + 8 * ty, c = c0 + 8 * tx;
    if (r < R && c < F) {
      In8 g[8], u[8], d[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        g[i] = *reinterpret_cast<const In8*>(inp + (r + i) * W + c);
        u[i] = *reinterpret_cast<const In8*>(inp + (r + i) * W + F + c);
        d[i] = *reinterpret_cast<const In8*>(dout + (r + i) * F + c);
      }
      uint32_t tg[8][2] = {}, tu[8][2] = {};
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        uint32_t qg[2] = {0u, 0u}, qu[2] = {0u, 0u};
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float x = to_f(g[i].v[j]), up = to_f(u[i].v[j]), dy = to_f(d[i].v[j]);
          const float sig = 1.f / (1.f + expf(-x));
          const float fg = to_f(from_f<T>(dy * up * sig * (1.f + x * (1.f - sig))));
          const float fu = to_f(from_f<T>(dy * x * sig));
          m = fmaxf(m, fmaxf(fabsf(fg), fabsf(fu)));
          const uint32_t bg = to_fp8<kE5M2>(fg * s), bu = to_fp8<kE5M2>(fu * s);
          qg[j / 4] |= bg << (8 * (j % 4));
          qu[j / 4] |= bu << (8 * (j % 4));
          tg[j][i / 4] |= bg << (8 * (i % 4));
          tu[j][i / 4] |= bu << (8 * (i % 4));
        }
        *reinterpret_cast<uint2*>(out + (r + i) * W + c) = make_uint2(qg[0], qg[1]);
        *reinterpret_cast<uint2*>(out + (r + i) * W + F + c) = make_uint2(qu[0], qu[1]);
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        tile_t[0][8 * tx + j][ty ^ (tx % kTy)] = make_uint2(tg[j][0], tg[j][1]);
        tile_t[1][8 * tx + j][ty ^ (tx % kTy)] = make_uint2(tu[j][0], tu[j][1]);
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < 2 * kCols * kTy; i += kTx * kTy) {
      const int half = i / (kCols * kTy), cc = (i / kTy) % kCols, k = i % kTy;
      const int64_t ct = c0 + cc, rt = r0 + 8 * k;
      if (ct < F && rt < R)
        *reinterpret_cast<uint2*>(out_t + (half * F + ct) * R + rt) = tile_t[half][cc][k ^ ((cc / 8) % kTy)];
    }
    __syncthreads();
  }
  commit_amax(m, amax);
}

// v3: v2 with kR rows per thread (8, 4 or 2: the transposed words are kR
// bytes) and, with kRcp, the backward's sigmoid as __frcp_rn(1 + e) (the
// correctly rounded reciprocal: the same bits as 1 / (1 + e), without the
// division's slow path). Fewer rows per thread: fewer registers, more warps
// to hide the loads behind another warp's math.
template <int kR> struct WordOf;
template <> struct WordOf<8> { using type = uint2; };
template <> struct WordOf<4> { using type = uint32_t; };
template <> struct WordOf<2> { using type = uint16_t; };

template <int kR>
__device__ __forceinline__ typename WordOf<kR>::type make_word(const uint32_t (&w)[2]) {
  if constexpr (kR == 8) return make_uint2(w[0], w[1]);
  else if constexpr (kR == 4) return w[0];
  else return static_cast<uint16_t>(w[0]);
}

template <typename T, bool kE5M2, int kTx, int kTy, int kR, int kMinBlocks, bool kBackward, bool kRcp>
__global__ void __launch_bounds__(kTx * kTy, kMinBlocks)
    swiglu_cast_v3_kernel(uint8_t* out, uint8_t* out_t, float* amax, const T* inp, const T* dout, const float* scale,
                          int64_t R, int64_t F) {
  static_assert((kTy & (kTy - 1)) == 0, "the swizzle needs a power-of-two kTy");
  using Word = typename WordOf<kR>::type;
  constexpr int kRows = kR * kTy, kCols = 8 * kTx, kHalves = kBackward ? 2 : 1;
  struct alignas(16) In8 { T v[8]; };
  __shared__ Word tile_t[kHalves][kCols][kTy];
  const float s = *scale;
  const int tx = threadIdx.x % kTx, ty = threadIdx.x / kTx;
  const int64_t c0 = int64_t(blockIdx.x) * kCols, row_tiles = (R + kRows - 1) / kRows;
  const int64_t W = kBackward ? 2 * F : F;
  float m = 0.f;
  for (int64_t tr = blockIdx.y; tr < row_tiles; tr += gridDim.y) {
    const int64_t r0 = tr * kRows, r = r0 + kR * ty, c = c0 + 8 * tx;
    if (r < R && c < F) {
      In8 g[kR], u[kR], d[kBackward ? kR : 1];
#pragma unroll
      for (int i = 0; i < kR; ++i) {
        g[i] = *reinterpret_cast<const In8*>(inp + (r + i) * 2 * F + c);
        u[i] = *reinterpret_cast<const In8*>(inp + (r + i) * 2 * F + F + c);
        if constexpr (kBackward) d[i] = *reinterpret_cast<const In8*>(dout + (r + i) * F + c);
      }
      uint32_t t[kHalves][8][2] = {};
#pragma unroll
      for (int i = 0; i < kR; ++i) {
        uint32_t q[kHalves][2] = {};
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float x = to_f(g[i].v[j]), up = to_f(u[i].v[j]);
          float f[kHalves];
          if constexpr (kBackward) {
            const float dy = to_f(d[i].v[j]);
            const float sig = kRcp ? __frcp_rn(1.f + expf(-x)) : 1.f / (1.f + expf(-x));
            f[0] = to_f(from_f<T>(dy * up * sig * (1.f + x * (1.f - sig))));
            f[kHalves - 1] = to_f(from_f<T>(dy * x * sig));
          } else {
            f[0] = to_f(from_f<T>(swiglu_value(x, up)));
          }
#pragma unroll
          for (int hf = 0; hf < kHalves; ++hf) {
            m = fmaxf(m, fabsf(f[hf]));
            const uint32_t b = to_fp8<kE5M2>(f[hf] * s);
            q[hf][j / 4] |= b << (8 * (j % 4));
            t[hf][j][i / 4] |= b << (8 * (i % 4));
          }
        }
#pragma unroll
        for (int hf = 0; hf < kHalves; ++hf)
          *reinterpret_cast<uint2*>(out + (r + i) * W + hf * F + c) = make_uint2(q[hf][0], q[hf][1]);
      }
#pragma unroll
      for (int hf = 0; hf < kHalves; ++hf)
#pragma unroll
        for (int j = 0; j < 8; ++j) tile_t[hf][8 * tx + j][ty ^ (tx % kTy)] = make_word<kR>(t[hf][j]);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kHalves * kCols * kTy; i += kTx * kTy) {
      const int hf = i / (kCols * kTy), cc = (i / kTy) % kCols, k = i % kTy;
      const int64_t ct = c0 + cc, rt = r0 + kR * k;
      if (ct < F && rt < R)
        *reinterpret_cast<Word*>(out_t + (hf * F + ct) * R + rt) = tile_t[hf][cc][k ^ ((cc / 8) % kTy)];
    }
    __syncthreads();
  }
  commit_amax(m, amax);
}

template <int kTx, int kTy, int kR, int kMinBlocks, bool kRcp, typename T>
void launch_v3(uint8_t* out, uint8_t* out_t, bool e5m2, float* amax, const T* inp, const T* dout,
               const float* scale, int64_t R, int64_t F, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(ceil_div(F, 8 * kTx)),
                  static_cast<unsigned>(std::min<int64_t>(ceil_div(R, kR * kTy), 65535)));
  constexpr int threads = kTx * kTy;
  if (dout) {
    if (e5m2)
      swiglu_cast_v3_kernel<T, true, kTx, kTy, kR, kMinBlocks, true, kRcp><<<grid, threads, 0, stream>>>(out, out_t, amax, inp, dout, scale, R, F);
    else
      swiglu_cast_v3_kernel<T, false, kTx, kTy, kR, kMinBlocks, true, kRcp><<<grid, threads, 0, stream>>>(out, out_t, amax, inp, dout, scale, R, F);
  } else {
    if (e5m2)
      swiglu_cast_v3_kernel<T, true, kTx, kTy, kR, kMinBlocks, false, kRcp><<<grid, threads, 0, stream>>>(out, out_t, amax, inp, dout, scale, R, F);
    else
      swiglu_cast_v3_kernel<T, false, kTx, kTy, kR, kMinBlocks, false, kRcp><<<grid, threads, 0, stream>>>(out, out_t, amax, inp, dout, scale, R, F);
  }
}

template <int kTx, int kTy, int kMinBlocks, typename T>
void launch_v2(uint8_t* out, uint8_t* out_t, bool e5m2, float* amax, const T* inp, const T* dout,
               const float* scale, int64_t R, int64_t F, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(ceil_div(F, 8 * kTx)),
                  static_cast<unsigned>(std::min<int64_t>(ceil_div(R, 8 * kTy), 65535)));
  constexpr int threads = kTx * kTy;
  if (dout) {
    if (e5m2)
      swiglu_backward_cast_v2_kernel<T, true, kTx, kTy, kMinBlocks><<<grid, threads, 0, stream>>>(out, out_t, amax, inp, dout, scale, R, F);
    else
      swiglu_backward_cast_v2_kernel<T, false, kTx, kTy, kMinBlocks><<<grid, threads, 0, stream>>>(out, out_t, amax, inp, dout, scale, R, F);
  } else {
    if (e5m2)
      swiglu_cast_v2_kernel<T, true, kTx, kTy, kMinBlocks><<<grid, threads, 0, stream>>>(out, out_t, amax, inp, scale, R, F);
    else
      swiglu_cast_v2_kernel<T, false, kTx, kTy, kMinBlocks><<<grid, threads, 0, stream>>>(out, out_t, amax, inp, scale, R, F);
  }
}

template <typename Src>
void launch_src(const Src& src, uint8_t* out, uint8_t* out_t, bool e5m2, float* amax, const float* scale,
                int64_t R, int64_t C, cudaStream_t stream) {
  constexpr int kTx = 16, kTy = 16;
  const dim3 grid(static_cast<unsigned>(ceil_div(C, 8 * kTx)),
                  static_cast<unsigned>(std::min<int64_t>(ceil_div(R, 8 * kTy), 65535)));
  if (e5m2) cast_transpose_src_kernel<Src, true, kTx, kTy><<<grid, kTx * kTy, 0, stream>>>(out, out_t, amax, src, scale, R, C);
  else cast_transpose_src_kernel<Src, false, kTx, kTy><<<grid, kTx * kTy, 0, stream>>>(out, out_t, amax, src, scale, R, C);
}

}  // namespace

// dout null: out (R, F), out_t (F, R) = the cast of swiglu(inp (R, 2F));
// else out (R, 2F), out_t (2F, R) = the cast of its backward. R and F
// multiples of 8, 16-byte aligned rows.
void dev_swiglu_cast_transpose(void* out, void* out_t, DType fp8, float* amax, const void* inp, const void* dout,
                               DType dt, const float* scale, int64_t R, int64_t F, cudaStream_t stream,
                               int variant) {
  auto* o = static_cast<uint8_t*>(out);
  auto* ot = static_cast<uint8_t*>(out_t);
  const bool e5m2 = fp8 == DType::E5M2;
  TRIPOD_DISPATCH_ACT(dt, T, {
    const T* in = static_cast<const T*>(inp);
    const T* d = static_cast<const T*>(dout);
    if constexpr (std::is_same_v<T, bf16>) switch (variant) {
      case 1: launch_v2<16, 16, 1>(o, ot, e5m2, amax, in, d, scale, R, F, stream); return;
      case 2: launch_v2<16, 16, 2>(o, ot, e5m2, amax, in, d, scale, R, F, stream); return;
      case 3: launch_v2<16, 8, 2>(o, ot, e5m2, amax, in, d, scale, R, F, stream); return;
      case 4: launch_v2<16, 8, 4>(o, ot, e5m2, amax, in, d, scale, R, F, stream); return;
      case 5: launch_v2<8, 8, 4>(o, ot, e5m2, amax, in, d, scale, R, F, stream); return;
      case 6: launch_v2<16, 4, 8>(o, ot, e5m2, amax, in, d, scale, R, F, stream); return;
      case 7: launch_v2<32, 4, 4>(o, ot, e5m2, amax, in, d, scale, R, F, stream); return;
      case 8: launch_v3<16, 8, 8, 2, false>(o, ot, e5m2, amax, in, d, scale, R, F, stream); return;
      case 9: launch_v3<16, 8, 8, 2, true>(o, ot, e5m2, amax, in, d, scale, R, F, stream); return;
      case 10: launch_v3<16, 16, 4, 2, true>(o, ot, e5m2, amax, in, d, scale, R, F, stream); return;
      case 11: launch_v3<16, 16, 4, 3, true>(o, ot, e5m2, amax, in, d, scale, R, F, stream); return;
      case 12: launch_v3<16, 8, 4, 4, true>(o, ot, e5m2, amax, in, d, scale, R, F, stream); return;
      case 13: launch_v3<16, 8, 4, 6, true>(o, ot, e5m2, amax, in, d, scale, R, F, stream); return;
      case 14: launch_v3<16, 16, 2, 4, true>(o, ot, e5m2, amax, in, d, scale, R, F, stream); return;
      case 15: launch_v3<16, 8, 4, 4, false>(o, ot, e5m2, amax, in, d, scale, R, F, stream); return;
      case 16: launch_v3<32, 8, 4, 3, true>(o, ot, e5m2, amax, in, d, scale, R, F, stream); return;
      case 17: launch_v3<8, 16, 4, 4, true>(o, ot, e5m2, amax, in, d, scale, R, F, stream); return;
      default: break;
    }
    if (dout)
      launch_src(SwigluGradSource<T>{static_cast<const T*>(inp), static_cast<const T*>(dout), F}, o, ot, e5m2, amax,
                 scale, R, 2 * F, stream);
    else
      launch_src(SwigluSource<T>{static_cast<const T*>(inp), F}, o, ot, e5m2, amax, scale, R, F, stream);
  });
  TRIPOD_LAUNCH_CHECK();
}

}  // namespace tripod::backend::cuda

using namespace tripod;

namespace {

std::vector<uint8_t> bytes(backend::Backend& be, const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), t.dtype());
  be.copy(h, t);
  be.synchronize();
  const auto* p = static_cast<const uint8_t*>(h.raw());
  return {p, p + h.numel() * dtype_size(h.dtype())};
}

template <typename F>
double time_us(backend::Backend& be, F&& fn) {
  for (int i = 0; i < 3; ++i) fn();
  be.synchronize();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  auto stream = static_cast<cudaStream_t>(be.native_stream());
  const int iters = 20;
  cudaEventRecord(a, stream);
  for (int i = 0; i < iters; ++i) fn();
  cudaEventRecord(b, stream);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms * 1e3 / iters;
}

Tensor random(backend::Backend& gpu, backend::Backend& cpu, int64_t n, float sd, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.f, sd);
  Tensor h = Tensor::empty({n}, DType::F32), hb = Tensor::empty({n}, DType::BF16);
  for (int64_t i = 0; i < n; ++i) h.data<float>()[i] = d(rng);
  cpu.cast(hb, h);
  Tensor x = gpu.empty({n}, DType::BF16);
  gpu.copy(x, hb);
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  if (backend::cuda_device_count() == 0) {
    std::printf("no CUDA device visible\n");
    return 0;
  }
  const int64_t R = argc > 2 ? std::atoll(argv[1]) : 8192, F = argc > 2 ? std::atoll(argv[2]) : 14336;
  auto gpu = backend::make_cuda_backend(0);
  auto cpu = backend::make_cpu_backend();
  auto stream = static_cast<cudaStream_t>(gpu->native_stream());
  const Tensor fc1 = random(*gpu, *cpu, R * 2 * F, 3.f, 1).view({R, 2 * F});
  const Tensor dact = random(*gpu, *cpu, R * F, 1.f, 2).view({R, F});
  Tensor scale = gpu->empty({1}, DType::F32), hs = Tensor::empty({1}, DType::F32);
  bool ok = true;
  for (bool backward : {false, true}) {
    const int64_t W = backward ? 2 * F : F;
    const DType fp8 = backward ? DType::E5M2 : DType::E4M3;
    hs.data<float>()[0] = backward ? 9000.f : 150.f;
    gpu->copy(scale, hs);
    Tensor tmp = gpu->empty({R, W}, DType::BF16), amax[2];
    Tensor out[2], out_t[2];
    for (int k = 0; k < 2; ++k)
      out[k] = gpu->empty({R, W}, fp8), out_t[k] = gpu->empty({W, R}, fp8), amax[k] = gpu->empty({1}, DType::F32);
    auto product = [&] {
      if (backward) gpu->swiglu_backward(tmp, fc1, dact);
      else gpu->swiglu_forward(tmp, fc1);
      gpu->fp8_cast_transpose(out[0], out_t[0], amax[0], tmp, scale);
    };
    gpu->zero(amax[0]);
    product();
    const double tp = time_us(*gpu, product);
    auto shipped = [&] {
      if (backward) gpu->fp8_swiglu_backward_cast_transpose(out[1], out_t[1], amax[1], fc1, dact, scale);
      else gpu->fp8_swiglu_cast_transpose(out[1], out_t[1], amax[1], fc1, scale);
    };
    gpu->zero(amax[1]);
    shipped();
    const bool shipped_same = bytes(*gpu, out[0]) == bytes(*gpu, out[1]) &&
                              bytes(*gpu, out_t[0]) == bytes(*gpu, out_t[1]) &&
                              bytes(*gpu, amax[0]) == bytes(*gpu, amax[1]);
    const double ts = time_us(*gpu, shipped);
    std::printf("%s (%lld, %lld): unfused %.1f us, shipped %.1f us (%.2fx), %s\n", backward ? "backward" : "forward",
                (long long)R, (long long)F, tp, ts, tp / ts, shipped_same ? "bit-exact" : "MISMATCH");
    ok = ok && shipped_same;
    // variant 0: v1 (row by row); 1-7: v2 (prefetch) tile shapes
    for (int variant = 0; variant <= 17; ++variant) {
      auto fused = [&] {
        backend::cuda::dev_swiglu_cast_transpose(out[1].raw(), out_t[1].raw(), fp8, amax[1].data<float>(),
                                                 fc1.raw(), backward ? dact.raw() : nullptr, DType::BF16,
                                                 scale.data<float>(), R, F, stream, variant);
      };
      gpu->zero(amax[1]);
      gpu->zero(out[1]);
      gpu->zero(out_t[1]);
      fused();
      const bool same = bytes(*gpu, out[0]) == bytes(*gpu, out[1]) &&
                        bytes(*gpu, out_t[0]) == bytes(*gpu, out_t[1]) && bytes(*gpu, amax[0]) == bytes(*gpu, amax[1]);
      const double tf = time_us(*gpu, fused);
      std::printf("  variant %d: %.1f us (%.2fx unfused), %s\n", variant, tf, tp / tf,
                  same ? "bit-exact" : "MISMATCH");
      ok = ok && same;
    }
  }
  return ok ? 0 : 1;
}
