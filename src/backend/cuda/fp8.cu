// FP8 casts (backend/ops.h: fp8_quantize, fp8_cast_transpose,
// fp8_dequantize) and the fallback FP8 GEMM. CUDA version of
// backend/cpu/fp8.cpp. The element rules (conversions, amax) are
// fp8_math.cuh's; the SwiGLU casts are in fp8_swiglu.cu.
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>

#include "backend/cuda/common.cuh"
#include "backend/cuda/fp8.cuh"
#include "backend/cuda/fp8_math.cuh"

namespace tripod::backend::cuda {
namespace {

// out = fp8(in * scale) elementwise; 8 elements per step when `packed`
// (n % 8 == 0, in 16-byte and out 8-byte aligned).
template <typename T, bool kE5M2>
__global__ void quantize_kernel(uint8_t* out, float* amax, const T* in, const float* scale, int64_t n,
                                bool packed) {
  const float s = *scale;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  float m = 0.f;
  if (packed) {
    struct alignas(16) In8 { T v[8]; };
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n / 8; i += stride) {
      const In8 x = reinterpret_cast<const In8*>(in)[i];
      uint32_t q[2] = {0u, 0u};
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float f = to_f(x.v[j]);
        m = fmaxf(m, fabsf(f));
        q[j / 4] |= uint32_t(to_fp8<kE5M2>(f * s)) << (8 * (j % 4));  // little-endian bytes
      }
      reinterpret_cast<uint2*>(out)[i] = make_uint2(q[0], q[1]);
    }
  } else {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += stride) {
      const float f = to_f(in[i]);
      m = fmaxf(m, fabsf(f));
      out[i] = to_fp8<kE5M2>(f * s);
    }
  }
  commit_amax(m, amax);
}

// NOTE [FP8 cast + transpose]
// in(R, C) -> out(R, C) and out_t(C, R) near memory bandwidth (the layout of
// Transformer Engine's cast_transpose). A block of kTx x kTy threads takes a
// tile of 8 kTy rows x 8 kTx columns; each thread an 8 x 8 sub-tile:
//  - 8 loads of 8 elements (16-byte loads; two for f32), one per row;
//  - per row, 8 codes -> one 8-byte store into out (a half warp writes 128
//    contiguous bytes of a row);
//  - the same 64 codes transposed in registers, column j's 8 codes -> one
//    8-byte word in shared memory, tile_t[column][row chunk];
//  - after the block's barrier, each thread copies 8-byte words of tile_t to
//    out_t, consecutive threads along out_t's rows (a half warp writes 128
//    contiguous bytes of a row of out_t for kTy = 16).
// tile_t's row chunk index is XOR-swizzled with the writer's column group
// ((column / 8) % kTy), so neither the writes (a half warp: 16 columns 8
// apart, one chunk) nor the reads (one column, all chunks) hit a bank twice.
// Needs R and C multiples of 8 (every sub-tile is whole or outside), in
// 16-byte aligned, out and out_t 8-byte aligned; other calls take
// cast_transpose_kernel_tile32. amax: one atomicMax per block. The codes are
// to_fp8's, element by element, so both kernels give the same bytes.
template <typename T, bool kE5M2, int kTx, int kTy>
__global__ void __launch_bounds__(kTx * kTy)
    cast_transpose_kernel(uint8_t* out, uint8_t* out_t, float* amax, const T* in, const float* scale, int64_t R,
                          int64_t C) {
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
    if (r < R && c < C) {
      In8 x[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) x[i] = *reinterpret_cast<const In8*>(in + (r + i) * C + c);
      uint32_t t[8][2] = {};  // t[j]: the codes of column j, rows 0..7 (little-endian bytes)
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        uint32_t q[2] = {0u, 0u};
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float f = to_f(x[i].v[j]);
          m = fmaxf(m, fabsf(f));
          const uint32_t b = to_fp8<kE5M2>(f * s);
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
    __syncthreads();  // tile_t is reused by the next row tile
  }
  commit_amax(m, amax);
}

// Any shape and alignment: 32 x 32 tiles, blocks of 32 x 8 threads, one
// element per thread and step; the tile goes through shared memory so both
// writes are by rows.
constexpr int kTile = 32, kTileRows = 8;
template <typename T, bool kE5M2>
__global__ void cast_transpose_kernel_tile32(uint8_t* out, uint8_t* out_t, float* amax, const T* in,
                                             const float* scale, int64_t R, int64_t C) {
  __shared__ uint8_t tile[kTile][kTile + 1];
  const float s = *scale;
  const int64_t c0 = int64_t(blockIdx.x) * kTile, row_tiles = (R + kTile - 1) / kTile;
  float m = 0.f;
  for (int64_t tr = blockIdx.y; tr < row_tiles; tr += gridDim.y) {
    const int64_t r0 = tr * kTile;
    for (int i = threadIdx.y; i < kTile; i += kTileRows) {
      const int64_t r = r0 + i, c = c0 + threadIdx.x;
      if (r < R && c < C) {
        const float f = to_f(in[r * C + c]);
        m = fmaxf(m, fabsf(f));
        const uint8_t q = to_fp8<kE5M2>(f * s);
        out[r * C + c] = q;
        tile[i][threadIdx.x] = q;
      }
    }
    __syncthreads();
    for (int i = threadIdx.y; i < kTile; i += kTileRows) {
      const int64_t c = c0 + i, r = r0 + threadIdx.x;
      if (c < C && r < R) out_t[c * R + r] = tile[threadIdx.x][i];
    }
    __syncthreads();  // the tile is reused by the next row tile
  }
  commit_amax(m, amax);
}

template <typename T>
__global__ void dequantize_kernel(T* out, const uint8_t* in, bool e5m2, const float* scale_inv, int64_t n,
                                  bool packed) {
  const float s = *scale_inv;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  if (packed) {
    struct alignas(16) Out8 { T v[8]; };
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n / 8; i += stride) {
      const uint2 raw = reinterpret_cast<const uint2*>(in)[i];
      Out8 y;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const uint8_t q = static_cast<uint8_t>((j < 4 ? raw.x : raw.y) >> (8 * (j % 4)));
        y.v[j] = from_f<T>(from_fp8(q, e5m2) * s);
      }
      reinterpret_cast<Out8*>(out)[i] = y;
    }
  } else {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += stride)
      out[i] = from_f<T>(from_fp8(in[i], e5m2) * s);
  }
}

template <typename T>
__global__ void matmul_fallback_kernel(T* out, const uint8_t* a, bool a_e5m2, const float* a_scale_inv,
                                       const uint8_t* b, bool b_e5m2, const float* b_scale_inv, const T* bias,
                                       bool accumulate, int64_t N, int64_t K, int64_t OC) {
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (idx >= N * OC) return;
  const int64_t n = idx / OC, o = idx % OC;
  float acc = 0.f;
  for (int64_t k = 0; k < K; ++k) acc += from_fp8(a[n * K + k], a_e5m2) * from_fp8(b[o * K + k], b_e5m2);
  float v = acc * (*a_scale_inv * *b_scale_inv);
  if (accumulate) v += to_f(out[idx]);
  if (bias) v += to_f(bias[o]);
  out[idx] = from_f<T>(v);
}

// One thread per tensor: roll its history, pick its amax, its scale (as
// backend/cpu/fp8.cpp: each operation correctly rounded, no fast math).
__global__ void update_scale_kernel(float* scale, float* scale_inv, float* history, const float* amax, int64_t M,
                                    int64_t H, float fp8_max, float margin_scale, bool use_max) {
  const int64_t m = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (m >= M) return;
  float a = amax[m];
  if (history) {
    float* row = history + m * H;
    for (int64_t h = H - 1; h > 0; --h) row[h] = row[h - 1];
    row[0] = a;
    if (use_max)
      for (int64_t h = 1; h < H; ++h) a = fmaxf(a, row[h]);
  }
  float sc = history ? scale[m] : 1.0f;  // kept when a is 0 or not finite
  if (a > 0.0f && isfinite(a)) {
    sc = __fmul_rn(__fdiv_rn(fp8_max, a), margin_scale);
    if (isinf(sc)) sc = 3.402823466e+38f;
  }
  scale[m] = sc;
  scale_inv[m] = __fdiv_rn(1.0f, sc);
}

// dst = fmaxf(dst, src[i * stride]) over i < n (one thread: n is at most 4).
__global__ void amax_fold_kernel(float* dst, const float* src, int n, int stride) {
  float m = *dst;
  for (int i = 0; i < n; ++i) m = fmaxf(m, src[i * stride]);
  *dst = m;
}

// Grouped-query attention as multi-head (attention_fp8_backward on the
// GPU): rows of qkv (H + 2G heads of D codes) to rows of 3H heads, K and V
// head g repeated for the H / G query heads of its group; 16 bytes a thread.
__global__ void expand_kv_kernel(uint4* dst, const uint4* src, int64_t rows, int H, int G, int D) {
  const int64_t per_head = D / 16, dst_row = int64_t(3) * H * per_head, src_row = int64_t(H + 2 * G) * per_head;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * dst_row) return;
  const int64_t r = i / dst_row, j = i % dst_row, head = j / per_head, within = j % per_head;
  const int rep = H / G;
  int64_t from = head;  // a Q head
  if (head >= 2 * H) from = H + G + (head - 2 * H) / rep;  // a V head
  else if (head >= H) from = H + (head - H) / rep;         // a K head
  dst[i] = src[r * src_row + from * per_head + within];
}

// The inverse for the gradients: dQ codes copied; dK, dV of group g = the
// sum of its query heads' decoded codes (all cast with one scale), cast
// again; amax = max(amax, max |sum| / scale) over the dK and dV elements.
// A thread takes 16 codes of a destination row (one 16-byte load per
// summed head; D a multiple of 16), the sum of each code in head order.
template <bool kE5M2>
__global__ void sum_kv_groups_kernel(uint4* dst, const uint4* src, const float* scale, float* amax, int64_t rows,
                                     int H, int G, int D) {
  const int64_t per_head = D / 16, dst_row = int64_t(H + 2 * G) * per_head, src_row = int64_t(3) * H * per_head;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  float m = 0.f;
  if (i < rows * dst_row) {
    const int64_t r = i / dst_row, j = i % dst_row, head = j / per_head, within = j % per_head;
    const uint4* row = src + r * src_row;
    if (head < H) {
      dst[i] = row[j];
    } else {
      const int rep = H / G;
      const int64_t first = head < H + G ? H + (head - H) * rep : 2 * H + (head - H - G) * rep;
      float sum[16] = {};
      for (int k = 0; k < rep; ++k) {
        const uint4 v = row[(first + k) * per_head + within];
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int e = 0; e < 16; ++e) sum[e] += from_fp8(static_cast<uint8_t>(w[e / 4] >> (8 * (e % 4))), kE5M2);
      }
      const float sc = *scale;
      uint32_t q[4] = {0u, 0u, 0u, 0u};
#pragma unroll
      for (int e = 0; e < 16; ++e) {
        q[e / 4] |= uint32_t(to_fp8<kE5M2>(sum[e])) << (8 * (e % 4));
        const float a = fabsf(sum[e]) / sc;
        if (!isnan(a)) m = fmaxf(m, a);
      }
      dst[i] = make_uint4(q[0], q[1], q[2], q[3]);
    }
  }
  commit_amax(m, amax);
}

}  // namespace

void fp8_attention_expand_kv(void* dst, const void* src, int64_t rows, int H, int G, int D, cudaStream_t stream) {
  const int64_t n = rows * 3 * H * (D / 16);
  const int threads = 256;
  expand_kv_kernel<<<unsigned((n + threads - 1) / threads), threads, 0, stream>>>(
      static_cast<uint4*>(dst), static_cast<const uint4*>(src), rows, H, G, D);
}

void fp8_attention_sum_kv_groups(void* dst, const void* src, DType fp8, const float* scale, float* amax, int64_t rows,
                                 int H, int G, int D, cudaStream_t stream) {
  const int64_t n = rows * (H + 2 * G) * (D / 16);
  const int threads = 256;
  const unsigned blocks = unsigned((n + threads - 1) / threads);
  auto* out = static_cast<uint4*>(dst);
  const auto* in = static_cast<const uint4*>(src);
  if (fp8 == DType::E5M2)
    sum_kv_groups_kernel<true><<<blocks, threads, 0, stream>>>(out, in, scale, amax, rows, H, G, D);
  else
    sum_kv_groups_kernel<false><<<blocks, threads, 0, stream>>>(out, in, scale, amax, rows, H, G, D);
}

void fp8_amax_fold(float* dst, const float* src, int n, int stride, cudaStream_t stream) {
  amax_fold_kernel<<<1, 1, 0, stream>>>(dst, src, n, stride);
}

void fp8_cast_transpose(void* out, void* out_t, DType fp8, float* amax, const void* in, DType dt,
                        const float* scale, int64_t R, int64_t C, cudaStream_t stream) {
  const int64_t n = R * C;
  if (n == 0) return;
  auto* o = static_cast<uint8_t*>(out);
  auto* ot = static_cast<uint8_t*>(out_t);
  TRIPOD_DISPATCH_ACT(dt, T, {
    const T* x = static_cast<const T*>(in);
    if (ot && R % 8 == 0 && C % 8 == 0 && aligned(in, 16) && aligned(out, 8) && aligned(out_t, 8)) {
      constexpr int kTx = 16, kTy = 16;  // 128 x 128 tiles, 256 threads (NOTE [FP8 cast + transpose])
      const dim3 grid(static_cast<unsigned>(ceil_div(C, 8 * kTx)),
                      static_cast<unsigned>(std::min<int64_t>(ceil_div(R, 8 * kTy), 65535)));
      if (fp8 == DType::E5M2)
        cast_transpose_kernel<T, true, kTx, kTy><<<grid, kTx * kTy, 0, stream>>>(o, ot, amax, x, scale, R, C);
      else cast_transpose_kernel<T, false, kTx, kTy><<<grid, kTx * kTy, 0, stream>>>(o, ot, amax, x, scale, R, C);
    } else if (ot) {
      const dim3 block(kTile, kTileRows);
      const dim3 grid(static_cast<unsigned>(ceil_div(C, kTile)),
                      static_cast<unsigned>(std::min<int64_t>(ceil_div(R, kTile), 65535)));
      if (fp8 == DType::E5M2)
        cast_transpose_kernel_tile32<T, true><<<grid, block, 0, stream>>>(o, ot, amax, x, scale, R, C);
      else cast_transpose_kernel_tile32<T, false><<<grid, block, 0, stream>>>(o, ot, amax, x, scale, R, C);
    } else {
      const bool packed = n % 8 == 0 && aligned(in, 16) && aligned(out, 8);
      const int block = 256;
      const unsigned grid = elementwise_grid(packed ? n / 8 : n, block);
      if (fp8 == DType::E5M2) quantize_kernel<T, true><<<grid, block, 0, stream>>>(o, amax, x, scale, n, packed);
      else quantize_kernel<T, false><<<grid, block, 0, stream>>>(o, amax, x, scale, n, packed);
    }
  });
  TRIPOD_LAUNCH_CHECK();
}

void fp8_dequantize(void* out, DType dt, const void* in, DType fp8, const float* scale_inv, int64_t n,
                    cudaStream_t stream) {
  if (n == 0) return;
  const bool packed = n % 8 == 0 && aligned(in, 8) && aligned(out, 16);
  const int block = 256;
  const unsigned grid = elementwise_grid(packed ? n / 8 : n, block);
  TRIPOD_DISPATCH_ACT(dt, T, {
    dequantize_kernel<T><<<grid, block, 0, stream>>>(static_cast<T*>(out), static_cast<const uint8_t*>(in),
                                                     fp8 == DType::E5M2, scale_inv, n, packed);
  });
  TRIPOD_LAUNCH_CHECK();
}

void fp8_matmul_fallback(void* out, DType dt, const void* a, DType a_fp8, const float* a_scale_inv,
                         const void* b, DType b_fp8, const float* b_scale_inv, const void* bias,
                         bool accumulate, int64_t N, int64_t K, int64_t OC, cudaStream_t stream) {
  if (N * OC == 0) return;
  const int block = 256;
  const unsigned grid = static_cast<unsigned>(ceil_div(N * OC, block));
  TRIPOD_DISPATCH_ACT(dt, T, {
    matmul_fallback_kernel<T><<<grid, block, 0, stream>>>(
        static_cast<T*>(out), static_cast<const uint8_t*>(a), a_fp8 == DType::E5M2, a_scale_inv,
        static_cast<const uint8_t*>(b), b_fp8 == DType::E5M2, b_scale_inv, static_cast<const T*>(bias),
        accumulate, N, K, OC);
  });
  TRIPOD_LAUNCH_CHECK();
}

void fp8_update_scale(float* scale, float* scale_inv, float* history, const float* amax, int64_t M, int64_t H,
                      float fp8_max, int margin, bool use_max, cudaStream_t stream) {
  if (M == 0) return;
  const int block = 128;
  update_scale_kernel<<<static_cast<unsigned>(ceil_div(M, block)), block, 0, stream>>>(
      scale, scale_inv, history, amax, M, H, fp8_max, std::ldexp(1.0f, -margin), use_max);
  TRIPOD_LAUNCH_CHECK();
}

}  // namespace tripod::backend::cuda
