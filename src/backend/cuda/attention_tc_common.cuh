// Shared pieces of the WMMA attention kernels (attention_tc.cu,
// attention_tc_bwd.cu): fragment types, shared-memory layout, tile loads.
// Internal to backend/cuda; see NOTE [Tensor-core attention].
#pragma once

#include <mma.h>

#include "backend/cuda/common.cuh"

namespace tripod::backend::cuda {

namespace wmma = nvcuda::wmma;

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;
inline constexpr int kTile = 64;    // rows of Q or K per tile
inline constexpr int kWarps = 4;    // 16 rows each

template <typename T> using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <typename T> using FragBc = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
template <typename T> using FragBr = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

template <int HS> struct TcLayout {
  static constexpr int kLdT = HS + 8;                           // staged bf16/f16 rows
  static constexpr int kLdF = (HS > kTile ? HS : kTile) + 4;    // per-warp f32 rows
  static constexpr int kLdP = kTile + 8;                        // per-warp P / dS rows
  static constexpr size_t tile_bytes = size_t(kTile) * kLdT * 2;
  static constexpr size_t warp_f32_bytes = size_t(16) * kLdF * 4;
  static constexpr size_t warp_p_bytes = size_t(16) * kLdP * 2;
};

// dst[r][0..HS) = src[(row0 + r) * stride + 0..HS), zero rows past T; 16-byte copies.
template <typename T, int HS>
__device__ __forceinline__ void load_tile(T* dst, const T* src, int64_t stride, int row0, int T_) {
  constexpr int kVec = HS / 8, kLd = TcLayout<HS>::kLdT;
  for (int e = threadIdx.x; e < kTile * kVec; e += blockDim.x) {
    int r = e / kVec, v = e % kVec, gr = row0 + r;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (gr < T_) val = *reinterpret_cast<const uint4*>(src + int64_t(gr) * stride + v * 8);
    *reinterpret_cast<uint4*>(dst + r * kLd + v * 8) = val;
  }
}

// Column of a 64-wide per-warp row that lane (row r, half) visits at step jj
// of its 32: rotated by r and, for the second half, by 16 more, so the 32
// lanes of a step hit 32 different banks of the f32 rows (stride 68 words).
__device__ __forceinline__ int stagger(int jj, int r, int half) {
  return half * (kTile / 2) + ((jj + r + 16 * half) & (kTile / 2 - 1));
}


}  // namespace tripod::backend::cuda
