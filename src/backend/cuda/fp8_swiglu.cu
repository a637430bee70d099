// The FP8 SwiGLU casts (backend/ops.h fp8_swiglu_cast_transpose and its
// backward): SwiGLU computed inside the FP8 cast + transpose.
//
// NOTE [FP8 SwiGLU casts]
// Under delayed scaling the scale of fc2's input (and of fc1's output
// gradient) is known before the tensor exists, so the SwiGLU kernel can
// write the codes and their transpose directly: the (R, F) activation
// (forward) and the (R, 2F) gradient (backward) are never written or read
// back. The tile is cast_transpose_kernel's (fp8.cu, NOTE [FP8 cast +
// transpose]: each thread an 8 x 8 sub-tile, the transpose through a
// swizzled shared tile), with the values computed instead of loaded:
//  - every load of a thread's sub-tile is issued before any value is
//    computed (8 rows of gate and up; backward also d act), so the loads are
//    in flight together. Computing row by row (load, expf, codes, next row)
//    moved half the bytes and still ran slower than the two unfused kernels
//    (bench/dev/cuda/fp8_swiglu_cast.cu keeps that variant and the tile
//    shapes that were timed);
//  - the backward thread computes d gate and d up of one column chunk
//    together: 6 bytes read and 4 bytes of codes written per (row, column),
//    against 18 bytes for swiglu_backward then the cast;
//  - blocks of 16 x 8 threads (64 rows x 128 columns) with at most half an
//    SM's registers each, so two blocks share an SM and one's loads overlap
//    the other's math.
// Each value is rounded to the compute dtype T before the cast, as
// swiglu_forward / swiglu_backward store it (swiglu_math.cuh's math), so the
// codes, transposes and amax are the unfused path's bit for bit. Needs R and
// F multiples of 8 and 16-byte aligned rows; other calls return false.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/fp8.cuh"
#include "backend/cuda/fp8_math.cuh"
#include "backend/cuda/swiglu_math.cuh"

namespace tripod::backend::cuda {
namespace {

constexpr int kTx = 16, kTy = 8, kMinBlocks = 2;  // threads along columns, rows; blocks per SM
constexpr int kRows = 8 * kTy, kCols = 8 * kTx;

template <typename T> struct alignas(16) In8 { T v[8]; };

template <typename T>
__device__ __forceinline__ In8<T> load8(const T* p) { return *reinterpret_cast<const In8<T>*>(p); }

// The 8 codes of row i of a sub-tile: q (a row of out) and, transposed,
// byte i of t[j] for column j.
struct SubTile {
  uint32_t t[8][2] = {};
  __device__ __forceinline__ void put(int i, int j, uint32_t b, uint32_t q[2]) {
    q[j / 4] |= b << (8 * (j % 4));
    t[j][i / 4] |= b << (8 * (i % 4));
  }
  // Column j's 8 codes into the shared transpose tile (the swizzle of
  // NOTE [FP8 cast + transpose]).
  __device__ __forceinline__ void stage(uint2 (*tile_t)[kTy], int tx, int ty) const {
#pragma unroll
    for (int j = 0; j < 8; ++j) tile_t[8 * tx + j][ty ^ (tx % kTy)] = make_uint2(t[j][0], t[j][1]);
  }
};

// The staged tile to out_t rows [col0, col0 + min(kCols, cols_left)), row
// tile r0; 8-byte words, consecutive threads along a row.
__device__ __forceinline__ void write_transposed(uint8_t* out_t, const uint2 (*tile_t)[kTy], int64_t col0,
                                                 int64_t cols_left, int64_t r0, int64_t R) {
  for (int i = threadIdx.x; i < kCols * kTy; i += kTx * kTy) {
    const int cc = i / kTy, k = i % kTy;
    const int64_t rt = r0 + 8 * k;
    if (cc < cols_left && rt < R) *reinterpret_cast<uint2*>(out_t + (col0 + cc) * R + rt) = tile_t[cc][k ^ ((cc / 8) % kTy)];
  }
}

// out (R, F), out_t (F, R) = the cast of swiglu(inp (R, 2F) = [gate | up]).
template <typename T, bool kE5M2>
__global__ void __launch_bounds__(kTx * kTy, kMinBlocks)
    swiglu_cast_transpose_kernel(uint8_t* out, uint8_t* out_t, float* amax, const T* inp, const float* scale,
                                 int64_t R, int64_t F) {
  __shared__ uint2 tile_t[kCols][kTy];
  const float s = *scale;
  const int tx = threadIdx.x % kTx, ty = threadIdx.x / kTx;
  const int64_t c0 = int64_t(blockIdx.x) * kCols, row_tiles = (R + kRows - 1) / kRows;
  float m = 0.f;
  for (int64_t tr = blockIdx.y; tr < row_tiles; tr += gridDim.y) {
    const int64_t r0 = tr * kRows, r = r0 + 8 * ty, c = c0 + 8 * tx;
    if (r < R && c < F) {
      In8<T> g[8], u[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        g[i] = load8(inp + (r + i) * 2 * F + c);
        u[i] = load8(inp + (r + i) * 2 * F + F + c);
      }
      SubTile st;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        uint32_t q[2] = {0u, 0u};
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float f = to_f(from_f<T>(swiglu_value(to_f(g[i].v[j]), to_f(u[i].v[j]))));
          m = fmaxf(m, fabsf(f));
          st.put(i, j, to_fp8<kE5M2>(f * s), q);
        }
        *reinterpret_cast<uint2*>(out + (r + i) * F + c) = make_uint2(q[0], q[1]);
      }
      st.stage(tile_t, tx, ty);
    }
    __syncthreads();
    write_transposed(out_t, tile_t, c0, F - c0, r0, R);
    __syncthreads();  // tile_t is reused by the next row tile
  }
  commit_amax(m, amax);
}

// out (R, 2F) = [d gate | d up], out_t (2F, R) = the cast of swiglu's
// backward for dout (R, F); a block takes columns [c0, c0 + kCols) of both
// halves.
template <typename T, bool kE5M2>
__global__ void __launch_bounds__(kTx * kTy, kMinBlocks)
    swiglu_backward_cast_transpose_kernel(uint8_t* out, uint8_t* out_t, float* amax, const T* inp, const T* dout,
                                          const float* scale, int64_t R, int64_t F) {
  __shared__ uint2 tile_t[2][kCols][kTy];
  const float s = *scale;
  const int tx = threadIdx.x % kTx, ty = threadIdx.x / kTx;
  const int64_t c0 = int64_t(blockIdx.x) * kCols, row_tiles = (R + kRows - 1) / kRows, W = 2 * F;
  float m = 0.f;
  for (int64_t tr = blockIdx.y; tr < row_tiles; tr += gridDim.y) {
    const int64_t r0 = tr * kRows, r = r0 + 8 * ty, c = c0 + 8 * tx;
    if (r < R && c < F) {
      In8<T> g[8], u[8], d[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        g[i] = load8(inp + (r + i) * W + c);
        u[i] = load8(inp + (r + i) * W + F + c);
        d[i] = load8(dout + (r + i) * F + c);
      }
      SubTile sg, su;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        uint32_t qg[2] = {0u, 0u}, qu[2] = {0u, 0u};
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          float fg, fu;
          swiglu_grads(to_f(g[i].v[j]), to_f(u[i].v[j]), to_f(d[i].v[j]), fg, fu);
          fg = to_f(from_f<T>(fg));
          fu = to_f(from_f<T>(fu));
          m = fmaxf(m, fmaxf(fabsf(fg), fabsf(fu)));
          sg.put(i, j, to_fp8<kE5M2>(fg * s), qg);
          su.put(i, j, to_fp8<kE5M2>(fu * s), qu);
        }
        *reinterpret_cast<uint2*>(out + (r + i) * W + c) = make_uint2(qg[0], qg[1]);
        *reinterpret_cast<uint2*>(out + (r + i) * W + F + c) = make_uint2(qu[0], qu[1]);
      }
      sg.stage(tile_t[0], tx, ty);
      su.stage(tile_t[1], tx, ty);
    }
    __syncthreads();
    write_transposed(out_t, tile_t[0], c0, F - c0, r0, R);
    write_transposed(out_t, tile_t[1], F + c0, F - c0, r0, R);
    __syncthreads();
  }
  commit_amax(m, amax);
}

}  // namespace

bool fp8_swiglu_cast_transpose(void* out, void* out_t, DType fp8, float* amax, const void* inp, const void* dout,
                               DType dt, const float* scale, int64_t R, int64_t F, cudaStream_t stream) {
  if (R % 8 != 0 || F % 8 != 0 || !aligned(inp, 16) || (dout && !aligned(dout, 16)) || !aligned(out, 8) ||
      !aligned(out_t, 8))
    return false;
  if (R * F == 0) return true;
  auto* o = static_cast<uint8_t*>(out);
  auto* ot = static_cast<uint8_t*>(out_t);
  const bool e5m2 = fp8 == DType::E5M2;
  const dim3 grid(static_cast<unsigned>(ceil_div(F, kCols)),
                  static_cast<unsigned>(std::min<int64_t>(ceil_div(R, kRows), 65535)));
  TRIPOD_DISPATCH_ACT(dt, T, {
    const T* x = static_cast<const T*>(inp);
    const T* d = static_cast<const T*>(dout);
    if (d && e5m2)
      swiglu_backward_cast_transpose_kernel<T, true><<<grid, kTx * kTy, 0, stream>>>(o, ot, amax, x, d, scale, R, F);
    else if (d)
      swiglu_backward_cast_transpose_kernel<T, false><<<grid, kTx * kTy, 0, stream>>>(o, ot, amax, x, d, scale, R, F);
    else if (e5m2)
      swiglu_cast_transpose_kernel<T, true><<<grid, kTx * kTy, 0, stream>>>(o, ot, amax, x, scale, R, F);
    else
      swiglu_cast_transpose_kernel<T, false><<<grid, kTx * kTy, 0, stream>>>(o, ot, amax, x, scale, R, F);
  });
  TRIPOD_LAUNCH_CHECK();
  return true;
}

}  // namespace tripod::backend::cuda
