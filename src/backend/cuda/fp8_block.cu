// FP8 block scaling (backend/ops.h: fp8_block_cast, fp8_block_cast_tiles,
// and the fallback of fp8_block_matmul): CUDA version of
// backend/cpu/fp8_block.cpp, which the casts match bit for bit. A block's
// amax is fmaxf over |x| (NaN skipped; max is order-free, so any reduction
// tree gives the reference's value), its scale fp8_math.cuh's block_scale,
// each code to_fp8(x * scale) (exact products: the scale is a power of two),
// its scale_inv 1 / scale (exact, correctly rounded division).
#include <cuda_fp8.h>

#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/fp8.cuh"
#include "backend/cuda/fp8_math.cuh"
#include "backend/cuda/swiglu_math.cuh"

namespace tripod::backend::cuda {
namespace {

constexpr int kB = 128;  // the block edge (backend/ops.h kFp8Block)
constexpr int kThreads = 256;

// What one launch writes: 1x128 blocks along rows (out, scale_inv); those
// and 128x1 blocks along columns (out_t, scale_inv_t); or 128x128 tiles
// (out, out_t the same codes transposed, both scale layouts).
enum class Mode { kRows, kRowsCols, kTiles };

// backend/ops.h fp8_blocks and fp8_tile_ld (a row of tile scales padded to
// 4 floats), for device code too.
__host__ __device__ __forceinline__ int64_t blocks(int64_t n) { return (n + kB - 1) / kB; }
__host__ __device__ __forceinline__ int64_t tile_ld(int64_t n) { return (blocks(n) + 3) / 4 * 4; }
__host__ __device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

__device__ __forceinline__ float inverse(float s) { return __fdiv_rn(1.f, s); }

// The padding of the tile scales (scale_inv's columns past ceil(C/128),
// scale_inv_t's past ceil(R/128)) is 1, as the reference writes it: the
// CTA of the last tile of each scale row writes it.
__device__ __forceinline__ void tile_scales(float* sinv, float* sinv_t, float s, int64_t tr, int64_t row_tiles,
                                            int64_t col_tiles, int64_t ld, int64_t ld_t) {
  const int64_t tc = blockIdx.x;
  if (threadIdx.x == 0) sinv[tr * ld + tc] = sinv_t[tc * ld_t + tr] = inverse(s);
  if (tc == col_tiles - 1)
    for (int64_t j = col_tiles + threadIdx.x; j < ld; j += blockDim.x) sinv[tr * ld + j] = 1.f;
  if (tr == row_tiles - 1)
    for (int64_t i = row_tiles + threadIdx.x; i < ld_t; i += blockDim.x) sinv_t[tc * ld_t + i] = 1.f;
}

template <typename T> struct alignas(16) In8 { T v[8]; };

template <typename T>
__device__ __forceinline__ In8<T> load8(const T* p) { return *reinterpret_cast<const In8<T>*>(p); }

// Where block_cast_kernel's values come from: fetch() issues the loads of
// 8 values of row r, columns c.. (all of a thread's fetches are issued
// before any value() is formed, so they are in flight together); value()
// forms them as the compute dtype T stores them.
template <typename T>
struct PlainSource {  // in (R, C)
  const T* in;
  int64_t C;
  using Raw = In8<T>;
  __device__ __forceinline__ void fetch(Raw& raw, int64_t r, int64_t c) const { raw = load8(in + r * C + c); }
  __device__ __forceinline__ In8<T> value(const Raw& raw, int64_t) const { return raw; }
};

template <typename T>
struct SwigluSource {  // swiglu_forward(inp (R, 2F)): (R, F)
  const T* inp;
  int64_t F;
  struct Raw { In8<T> g, u; };
  __device__ __forceinline__ void fetch(Raw& raw, int64_t r, int64_t c) const {
    raw.g = load8(inp + r * 2 * F + c);
    raw.u = load8(inp + r * 2 * F + F + c);
  }
  __device__ __forceinline__ In8<T> value(const Raw& raw, int64_t) const {
    In8<T> y;
#pragma unroll
    for (int j = 0; j < 8; ++j) y.v[j] = from_f<T>(swiglu_value(to_f(raw.g.v[j]), to_f(raw.u.v[j])));
    return y;
  }
};

// swiglu_backward(inp (R, 2F), dout (R, F)): (R, 2F) = [d gate | d up]. A
// group of 8 columns lies in one half (F is a multiple of 8); the other
// half's CTA loads the same inputs again (from L2 mostly).
template <typename T>
struct SwigluBackwardSource {
  const T* inp;
  const T* dout;
  int64_t F;
  struct Raw { In8<T> g, u, d; };
  __device__ __forceinline__ void fetch(Raw& raw, int64_t r, int64_t c) const {
    const int64_t k = c < F ? c : c - F;
    raw.g = load8(inp + r * 2 * F + k);
    raw.u = load8(inp + r * 2 * F + F + k);
    raw.d = load8(dout + r * F + k);
  }
  __device__ __forceinline__ In8<T> value(const Raw& raw, int64_t c) const {
    In8<T> y;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float dg, du;
      swiglu_grads(to_f(raw.g.v[j]), to_f(raw.u.v[j]), to_f(raw.d.v[j]), dg, du);
      y.v[j] = from_f<T>(c < F ? dg : du);
    }
    return y;
  }
};

// NOTE [FP8 block casts]
// One CTA of 256 threads per 128 x 128 tile of in(R, C) (blockIdx.x the
// column tile; blockIdx.y strides over the row tiles). A tile holds whole
// blocks of every kind: its rows are the 1x128 blocks of out, its columns
// the 128-row blocks of out_t, itself the 128x128 tile. As NOTE [FP8 cast +
// transpose] in fp8.cu, thread (ty, tx) = (threadIdx.x / 16, threadIdx.x % 16)
// holds the 8 x 8 sub-tile at rows 8 ty.., columns 8 tx.. in registers
// (8 16-byte loads; two for f32), so the input is read once:
//  - row amax: each thread's max over its 8 columns, then over the 16
//    threads of the row (a half warp: xor shuffles 8, 4, 2, 1); every lane
//    has the row's scale, lane tx = 0 writes its scale_inv;
//  - column amax (kRowsCols): each thread's max over its 8 rows, the two
//    row groups of a warp (xor 16), then the 8 warps through shared memory;
//    thread t < 128 forms column t's scale and writes its scale_inv_t;
//  - tile amax (kTiles): warp maxima, then the block's through shared memory;
//  - codes: per row, 8 codes -> one 8-byte store into out; the column codes
//    (their own scales, or the tile's) transposed in registers into tile_t
//    and copied to out_t by rows of out_t, XOR-swizzled as in fp8.cu.
// Needs R and C multiples of 8 (each sub-tile whole or outside: cut tiles
// at the right and bottom edges just have idle threads), in 16-byte and
// out, out_t 8-byte aligned; other calls take block_cast_any_kernel. The
// values come from a Source: in itself, or SwiGLU (forward or backward)
// computed on the fly (fp8_swiglu_block_cast).
template <typename T, bool kE5M2, Mode kMode, typename Source>
__global__ void __launch_bounds__(kThreads)
    block_cast_kernel(uint8_t* out, uint8_t* out_t, float* sinv, float* sinv_t, const Source src, int64_t R,
                      int64_t C, float fp8_max) {
  constexpr bool kT = kMode != Mode::kRows;
  __shared__ uint2 tile_t[kT ? kB : 1][16];
  __shared__ float part[8][kB];  // per-warp column maxima, or warp maxima (part[0])
  __shared__ float col_scale[kB];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t c0 = int64_t(blockIdx.x) * kB, row_tiles = blocks(R), col_tiles = gridDim.x;
  const int64_t ld = kMode == Mode::kTiles ? tile_ld(C) : 0, ld_t = kMode == Mode::kTiles ? tile_ld(R) : 0;
  for (int64_t tr = blockIdx.y; tr < row_tiles; tr += gridDim.y) {
    const int64_t r0 = tr * kB, r = r0 + 8 * ty, c = c0 + 8 * tx;
    const bool valid = r < R && c < C;
    In8<T> x[8];
    if (valid) {
      typename Source::Raw raw[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) src.fetch(raw[i], r + i, c);
#pragma unroll
      for (int i = 0; i < 8; ++i) x[i] = src.value(raw[i], c);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) x[i].v[j] = from_f<T>(0.f);  // adds nothing to any amax
    }
    float rs[8], cs[8];  // the scales of this thread's rows and columns
    if constexpr (kMode == Mode::kTiles) {
      float m = 0.f;
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) m = fmaxf(m, fabsf(to_f(x[i].v[j])));
      m = warp_max(m);
      if (lane == 0) part[0][warp] = m;
      __syncthreads();
#pragma unroll
      for (int w = 0; w < kThreads / 32; ++w) m = fmaxf(m, part[0][w]);
      const float s = block_scale(m, fp8_max);
#pragma unroll
      for (int i = 0; i < 8; ++i) rs[i] = cs[i] = s;
      tile_scales(sinv, sinv_t, s, tr, row_tiles, col_tiles, ld, ld_t);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        float m = 0.f;
#pragma unroll
        for (int j = 0; j < 8; ++j) m = fmaxf(m, fabsf(to_f(x[i].v[j])));
#pragma unroll
        for (int o = 8; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        rs[i] = block_scale(m, fp8_max);
        if (tx == 0 && r < R) sinv[blockIdx.x * R + r + i] = inverse(rs[i]);
      }
      if constexpr (kMode == Mode::kRowsCols) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          float m = 0.f;
#pragma unroll
          for (int i = 0; i < 8; ++i) m = fmaxf(m, fabsf(to_f(x[i].v[j])));
          m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 16));
          if (lane < 16) part[warp][8 * tx + j] = m;
        }
        __syncthreads();
        if (threadIdx.x < kB) {
          float m = 0.f;
#pragma unroll
          for (int w = 0; w < kThreads / 32; ++w) m = fmaxf(m, part[w][threadIdx.x]);
          const float s = block_scale(m, fp8_max);
          col_scale[threadIdx.x] = s;
          if (c0 + threadIdx.x < C) sinv_t[tr * C + c0 + threadIdx.x] = inverse(s);
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < 8; ++j) cs[j] = col_scale[8 * tx + j];
      }
    }
    if (valid) {
      uint32_t t[8][2] = {};  // t[j]: the column codes of column j, rows 0..7 (little-endian bytes)
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        uint32_t q[2] = {0u, 0u};
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float f = to_f(x[i].v[j]);
          const uint32_t b = to_fp8<kE5M2>(f * rs[i]);
          q[j / 4] |= b << (8 * (j % 4));
          if constexpr (kMode == Mode::kTiles) t[j][i / 4] |= b << (8 * (i % 4));
          else if constexpr (kT) t[j][i / 4] |= uint32_t(to_fp8<kE5M2>(f * cs[j])) << (8 * (i % 4));
        }
        *reinterpret_cast<uint2*>(out + (r + i) * C + c) = make_uint2(q[0], q[1]);
      }
      if constexpr (kT) {
#pragma unroll
        for (int j = 0; j < 8; ++j) tile_t[8 * tx + j][ty ^ tx] = make_uint2(t[j][0], t[j][1]);
      }
    }
    if constexpr (kT) {
      __syncthreads();
      for (int i = threadIdx.x; i < kB * 16; i += kThreads) {
        const int cc = i / 16, k = i % 16;
        const int64_t ct = c0 + cc, rt = r0 + 8 * k;
        if (ct < C && rt < R) *reinterpret_cast<uint2*>(out_t + ct * R + rt) = tile_t[cc][k ^ (cc / 8)];
      }
    }
    __syncthreads();  // part, col_scale and tile_t are reused by the next row tile
  }
}

// Any shape and alignment, element by element, one CTA per 128 x 128 tile:
// the amaxes by warps along rows (lanes over columns) and by threads down
// columns (coalesced across threads), then the codes, the column codes
// through shared memory so out_t is written by rows. Reads the tile two or
// three times (the later reads hit L2): the shapes it serves (widths not a
// multiple of 8) are rare.
template <typename T, bool kE5M2, Mode kMode>
__global__ void __launch_bounds__(kThreads)
    block_cast_any_kernel(uint8_t* out, uint8_t* out_t, float* sinv, float* sinv_t, const T* in, int64_t R,
                          int64_t C, float fp8_max) {
  constexpr bool kT = kMode != Mode::kRows;
  __shared__ float rs[kB], cs[kB], part[2][kB];
  __shared__ uint8_t tile_t[kT ? kB : 1][kB + 1];  // [column][row]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t c0 = int64_t(blockIdx.x) * kB, row_tiles = blocks(R), col_tiles = gridDim.x;
  const int nc = static_cast<int>(min64(kB, C - c0));
  for (int64_t tr = blockIdx.y; tr < row_tiles; tr += gridDim.y) {
    const int64_t r0 = tr * kB;
    const int nr = static_cast<int>(min64(kB, R - r0));
    auto at = [&](int i, int j) { return to_f(in[(r0 + i) * C + c0 + j]); };
    if constexpr (kMode == Mode::kTiles) {
      float m = 0.f;
      for (int k = threadIdx.x; k < kB * kB; k += kThreads)
        if (k / kB < nr && k % kB < nc) m = fmaxf(m, fabsf(at(k / kB, k % kB)));
      const float s = block_scale(block_max(m, part[0]), fp8_max);
      if (threadIdx.x < kB) rs[threadIdx.x] = cs[threadIdx.x] = s;
      tile_scales(sinv, sinv_t, s, tr, row_tiles, col_tiles, tile_ld(C), tile_ld(R));
    } else {
      for (int i = warp; i < nr; i += kThreads / 32) {
        float m = 0.f;
        for (int j = lane; j < nc; j += 32) m = fmaxf(m, fabsf(at(i, j)));
        m = warp_max(m);
        if (lane == 0) {
          rs[i] = block_scale(m, fp8_max);
          sinv[blockIdx.x * R + r0 + i] = inverse(rs[i]);
        }
      }
      if constexpr (kMode == Mode::kRowsCols) {
        const int j = threadIdx.x % kB, half = threadIdx.x / kB;
        float m = 0.f;
        if (j < nc)
          for (int i = half; i < nr; i += kThreads / kB) m = fmaxf(m, fabsf(at(i, j)));
        part[half][j] = m;
        __syncthreads();
        if (threadIdx.x < nc) {
          cs[j] = block_scale(fmaxf(part[0][j], part[1][j]), fp8_max);
          sinv_t[tr * C + c0 + j] = inverse(cs[j]);
        }
      }
    }
    __syncthreads();
    for (int k = threadIdx.x; k < kB * kB; k += kThreads) {
      const int i = k / kB, j = k % kB;
      if (i < nr && j < nc) {
        const float f = at(i, j);
        out[(r0 + i) * C + c0 + j] = to_fp8<kE5M2>(f * rs[i]);
        if constexpr (kT) tile_t[j][i] = to_fp8<kE5M2>(f * cs[j]);
      }
    }
    if constexpr (kT) {
      __syncthreads();
      for (int k = threadIdx.x; k < kB * kB; k += kThreads) {
        const int j = k / kB, i = k % kB;
        if (i < nr && j < nc) out_t[(c0 + j) * R + r0 + i] = tile_t[j][i];
      }
    }
    __syncthreads();  // rs, cs, part and tile_t are reused by the next row tile
  }
}

template <Mode kMode>
void launch_block_cast(void* out, void* out_t, float* sinv, float* sinv_t, DType fp8, const void* in, DType dt,
                       int64_t R, int64_t C, cudaStream_t stream) {
  if (R == 0 || C == 0) return;
  const float mx = fp8_max(fp8);
  auto* o = static_cast<uint8_t*>(out);
  auto* ot = static_cast<uint8_t*>(out_t);
  const dim3 grid(static_cast<unsigned>(blocks(C)), static_cast<unsigned>(min64(blocks(R), 65535)));
  const bool fast = R % 8 == 0 && C % 8 == 0 && aligned(in, 16) && aligned(out, 8) && (!out_t || aligned(out_t, 8));
  TRIPOD_DISPATCH_ACT(dt, T, {
    const T* x = static_cast<const T*>(in);
    if (fast) {
      const PlainSource<T> src{x, C};
      if (fp8 == DType::E5M2)
        block_cast_kernel<T, true, kMode><<<grid, kThreads, 0, stream>>>(o, ot, sinv, sinv_t, src, R, C, mx);
      else block_cast_kernel<T, false, kMode><<<grid, kThreads, 0, stream>>>(o, ot, sinv, sinv_t, src, R, C, mx);
    } else {
      if (fp8 == DType::E5M2)
        block_cast_any_kernel<T, true, kMode><<<grid, kThreads, 0, stream>>>(o, ot, sinv, sinv_t, x, R, C, mx);
      else block_cast_any_kernel<T, false, kMode><<<grid, kThreads, 0, stream>>>(o, ot, sinv, sinv_t, x, R, C, mx);
    }
  });
  TRIPOD_LAUNCH_CHECK();
}

// One thread per output. As Hopper's block-scaled GEMM promotes per block,
// each 128-wide K block's sum of code products (exact products, f32 sum)
// is scaled by its two scale_invs and added to the f32 accumulator.
template <typename T>
__global__ void block_matmul_fallback_kernel(T* out, const uint8_t* a, bool a_e5m2, const float* a_sinv,
                                             const uint8_t* b, bool b_e5m2, const float* b_sinv, bool b_tiles,
                                             const T* bias, bool accumulate, int64_t N, int64_t K, int64_t OC) {
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (idx >= N * OC) return;
  const int64_t n = idx / OC, o = idx % OC, ld = tile_ld(K);
  float acc = 0.f;
  for (int64_t k0 = 0, blk = 0; k0 < K; k0 += kB, ++blk) {
    const int64_t k1 = min64(K, k0 + kB);
    float part = 0.f;
    for (int64_t k = k0; k < k1; ++k) part += from_fp8(a[n * K + k], a_e5m2) * from_fp8(b[o * K + k], b_e5m2);
    const float sb = b_tiles ? b_sinv[(o / kB) * ld + blk] : b_sinv[blk * OC + o];
    acc += part * (a_sinv[blk * N + n] * sb);
  }
  float v = acc;
  if (accumulate) v += to_f(out[idx]);
  if (bias) v += to_f(bias[o]);
  out[idx] = from_f<T>(v);
}

}  // namespace

void fp8_block_cast(void* out, float* scale_inv, void* out_t, float* scale_inv_t, DType fp8, const void* in,
                    DType dt, int64_t R, int64_t C, cudaStream_t stream) {
  if (out_t)
    launch_block_cast<Mode::kRowsCols>(out, out_t, scale_inv, scale_inv_t, fp8, in, dt, R, C, stream);
  else
    launch_block_cast<Mode::kRows>(out, nullptr, scale_inv, nullptr, fp8, in, dt, R, C, stream);
}

void fp8_block_cast_tiles(void* out, void* out_t, float* scale_inv, float* scale_inv_t, DType fp8, const void* in,
                          DType dt, int64_t R, int64_t C, cudaStream_t stream) {
  launch_block_cast<Mode::kTiles>(out, out_t, scale_inv, scale_inv_t, fp8, in, dt, R, C, stream);
}

bool fp8_swiglu_block_cast(void* out, float* scale_inv, void* out_t, float* scale_inv_t, DType fp8, const void* inp,
                           const void* dout, DType dt, int64_t R, int64_t F, cudaStream_t stream) {
  if (R % 8 != 0 || F % 8 != 0 || !aligned(inp, 16) || (dout && !aligned(dout, 16)) || !aligned(out, 8) ||
      !aligned(out_t, 8))
    return false;
  const int64_t W = dout ? 2 * F : F;
  if (R * W == 0) return true;
  const float mx = fp8_max(fp8);
  auto* o = static_cast<uint8_t*>(out);
  auto* ot = static_cast<uint8_t*>(out_t);
  const dim3 grid(static_cast<unsigned>(blocks(W)), static_cast<unsigned>(min64(blocks(R), 65535)));
  constexpr Mode kM = Mode::kRowsCols;
  TRIPOD_DISPATCH_ACT(dt, T, {
    const T* x = static_cast<const T*>(inp);
    if (dout) {
      const SwigluBackwardSource<T> src{x, static_cast<const T*>(dout), F};
      if (fp8 == DType::E5M2)
        block_cast_kernel<T, true, kM><<<grid, kThreads, 0, stream>>>(o, ot, scale_inv, scale_inv_t, src, R, W, mx);
      else block_cast_kernel<T, false, kM><<<grid, kThreads, 0, stream>>>(o, ot, scale_inv, scale_inv_t, src, R, W, mx);
    } else {
      const SwigluSource<T> src{x, F};
      if (fp8 == DType::E5M2)
        block_cast_kernel<T, true, kM><<<grid, kThreads, 0, stream>>>(o, ot, scale_inv, scale_inv_t, src, R, W, mx);
      else block_cast_kernel<T, false, kM><<<grid, kThreads, 0, stream>>>(o, ot, scale_inv, scale_inv_t, src, R, W, mx);
    }
  });
  TRIPOD_LAUNCH_CHECK();
  return true;
}

void fp8_block_matmul_fallback(void* out, DType dt, const void* a, DType a_fp8, const float* a_scale_inv,
                               const void* b, DType b_fp8, const float* b_scale_inv, bool b_tiles, const void* bias,
                               bool accumulate, int64_t N, int64_t K, int64_t OC, cudaStream_t stream) {
  if (N * OC == 0) return;
  const int block = 256;
  const unsigned grid = static_cast<unsigned>(ceil_div(N * OC, block));
  TRIPOD_DISPATCH_ACT(dt, T, {
    block_matmul_fallback_kernel<T><<<grid, block, 0, stream>>>(
        static_cast<T*>(out), static_cast<const uint8_t*>(a), a_fp8 == DType::E5M2, a_scale_inv,
        static_cast<const uint8_t*>(b), b_fp8 == DType::E5M2, b_scale_inv, b_tiles, static_cast<const T*>(bias),
        accumulate, N, K, OC);
  });
  TRIPOD_LAUNCH_CHECK();
}

}  // namespace tripod::backend::cuda
