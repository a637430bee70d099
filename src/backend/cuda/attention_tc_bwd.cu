// Tensor-core attention backward (the default for bf16/f16): the
// FlashAttention-2 split of NOTE [Tensor-core attention] (a dK/dV kernel and a
// dQ kernel, no atomics). Compared with the first version (16x64 per-warp
// buffers, bench/dev/cuda/attention_backward_tc1.cu) it holds less shared
// memory per warp so more blocks fit
// on a multiprocessor: S and dP are taken 16 columns at a time through a
// 16x16 f32 buffer (instead of a 16x64 one), and the final f32 staging of the
// accumulators reuses the tile buffers. See NOTE [Tensor-core attention].
#include <type_traits>

#include "backend/cuda/attention_tc.cuh"
#include "backend/cuda/attention_tc_common.cuh"

namespace tripod::backend::cuda {

namespace {

constexpr int kLdB = 20;                                  // 16x16 f32 block rows
constexpr size_t kBlockBytes = size_t(16) * kLdB * 4;     // 1280, 32-byte multiple

template <int HS> struct Tc2Layout {
  using L = TcLayout<HS>;
  static constexpr size_t warp_bytes = 2 * kBlockBytes + 2 * L::warp_p_bytes;
  static constexpr size_t smem_bytes = 4 * L::tile_bytes + kWarps * warp_bytes + 2 * kTile * 4;
  // Staging of two 16 x (HS+4) f32 blocks per warp must fit in the 4 tiles.
  static_assert(kWarps * 2 * 16 * (HS + 4) * 4 <= 4 * L::tile_bytes, "staging does not fit");
};

// Writes the warp's two 16 x HS accumulators (scaled by sa, sb) into the
// columns [ca, ca+HS) and [cb, cb+HS) of rows row0.. of out (row stride ld);
// stage: 2 * 16 * (HS+4) f32 of this warp.
template <typename T, int HS>
__device__ __forceinline__ void write_rows(T* out, int64_t ld, int row0, int T_, float* stage,
                                           FragC (&fa)[HS / 16], float sa, int ca,
                                           FragC (&fb)[HS / 16], float sb, int cb, bool two) {
  constexpr int LD = HS + 4;
  for (int dn = 0; dn < HS / 16; ++dn) {
    wmma::store_matrix_sync(stage + dn * 16, fa[dn], LD, wmma::mem_row_major);
    if (two) wmma::store_matrix_sync(stage + 16 * LD + dn * 16, fb[dn], LD, wmma::mem_row_major);
  }
  __syncwarp();
  const int lane = threadIdx.x % 32, r = lane >> 1, half = lane & 1, row = row0 + r;
  if (row >= T_) return;
  T* o = out + int64_t(row) * ld;
  for (int d = half * (HS / 2); d < (half + 1) * (HS / 2); ++d) {
    o[ca + d] = from_f<T>(stage[r * LD + d] * sa);
    if (two) o[cb + d] = from_f<T>(stage[16 * LD + r * LD + d] * sb);
  }
}

}  // namespace

// ---- kernels ----

// Three blocks per multiprocessor for HS <= 64 (66 KB of shared memory each):
// caps registers at 170 so registers do not become the limit instead.
template <int HS> constexpr int kTc2MinBlocks = HS <= 64 ? 3 : 1;

template <typename T, int HS>
__global__ void __launch_bounds__(128, kTc2MinBlocks<HS>) attention_dkdv_backward_kernel_tc2(
    T* dqkv, const T* dout, const T* qkv, const float* lse, const float* D, int T_, int NH, int G,
    float scale) {
  using L = TcLayout<HS>;
  constexpr int LDT = L::kLdT, LDP = L::kLdP, KS = HS / 16, QS = kTile / 16;
  extern __shared__ __align__(128) unsigned char smem[];
  T* Ks = reinterpret_cast<T*>(smem);
  T* Vs = Ks + kTile * LDT;
  T* Qs = Vs + kTile * LDT;
  T* Gs = Qs + kTile * LDT;  // dout tile
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  unsigned char* wbase = smem + 4 * L::tile_bytes;
  unsigned char* mine = wbase + warp * Tc2Layout<HS>::warp_bytes;
  float* Sb = reinterpret_cast<float*>(mine);
  float* dPb = reinterpret_cast<float*>(mine + kBlockBytes);
  T* Pt = reinterpret_cast<T*>(mine + 2 * kBlockBytes);
  T* dSt = reinterpret_cast<T*>(mine + 2 * kBlockBytes + L::warp_p_bytes);
  float* Ls = reinterpret_cast<float*>(wbase + kWarps * Tc2Layout<HS>::warp_bytes);
  float* Ds = Ls + kTile;
  const int C = NH * HS, C3 = (NH + 2 * G) * HS, group = NH / G;
  const int k0 = blockIdx.x * kTile;
  const int b = blockIdx.y / G, kvh = blockIdx.y % G;
  const int koff = C + kvh * HS, voff = C + (G + kvh) * HS;
  const T* rows = qkv + int64_t(b) * T_ * C3;
  load_tile<T, HS>(Ks, rows + koff, C3, k0, T_);
  load_tile<T, HS>(Vs, rows + voff, C3, k0, T_);
  __syncthreads();
  FragA<T> ka[KS], va[KS];
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
    wmma::load_matrix_sync(ka[kk], Ks + warp * 16 * LDT + kk * 16, LDT);
    wmma::load_matrix_sync(va[kk], Vs + warp * 16 * LDT + kk * 16, LDT);
  }
  FragC dk[KS], dv[KS];
#pragma unroll
  for (int dn = 0; dn < KS; ++dn) {
    wmma::fill_fragment(dk[dn], 0.f);
    wmma::fill_fragment(dv[dn], 0.f);
  }
  const int cc = lane & 15, r0 = lane >> 4;  // element (r0 + 2k, cc) of each 16x16 block
  const float sl2 = scale * kLog2e;
  // The query heads of this K/V head's group, one after the other.
  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
    const T* base = rows + h * HS;
    const T* gbase = dout + int64_t(b) * T_ * C + h * HS;
    const float* lrow = lse + (int64_t(b) * NH + h) * T_;
    const float* drow = D + (int64_t(b) * NH + h) * T_;
    for (int q0 = k0; q0 < T_; q0 += kTile) {
      __syncthreads();
      load_tile<T, HS>(Qs, base, C3, q0, T_);
      load_tile<T, HS>(Gs, gbase, C, q0, T_);
      for (int e = threadIdx.x; e < kTile; e += blockDim.x) {
        bool in = q0 + e < T_;
        Ls[e] = in ? lrow[q0 + e] * kLog2e : 0.f;
        Ds[e] = in ? drow[q0 + e] : 0.f;
      }
      __syncthreads();
#pragma unroll
      for (int n = 0; n < QS; ++n) {
        FragC s, dp;
        wmma::fill_fragment(s, 0.f);
        wmma::fill_fragment(dp, 0.f);
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) {
          FragBc<T> qb, gb;
          wmma::load_matrix_sync(qb, Qs + n * 16 * LDT + kk * 16, LDT);
          wmma::load_matrix_sync(gb, Gs + n * 16 * LDT + kk * 16, LDT);
          wmma::mma_sync(s, ka[kk], qb, s);
          wmma::mma_sync(dp, va[kk], gb, dp);
        }
        wmma::store_matrix_sync(Sb, s, kLdB, wmma::mem_row_major);
        wmma::store_matrix_sync(dPb, dp, kLdB, wmma::mem_row_major);
        __syncwarp();
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const int rr = r0 + 2 * k, ii = n * 16 + cc, qi = q0 + ii, j = k0 + warp * 16 + rr;
          const bool valid = qi >= j && qi < T_ && j < T_;
          const float p = valid ? exp2f(Sb[rr * kLdB + cc] * sl2 - Ls[ii]) : 0.f;
          Pt[rr * LDP + ii] = from_f<T>(p);
          dSt[rr * LDP + ii] = from_f<T>(p * (dPb[rr * kLdB + cc] - Ds[ii]));
        }
        __syncwarp();
      }
#pragma unroll
      for (int kk = 0; kk < QS; ++kk) {
        FragA<T> pa, sa;
        wmma::load_matrix_sync(pa, Pt + kk * 16, LDP);
        wmma::load_matrix_sync(sa, dSt + kk * 16, LDP);
#pragma unroll
        for (int dn = 0; dn < KS; ++dn) {
          FragBr<T> gb, qb;
          wmma::load_matrix_sync(gb, Gs + kk * 16 * LDT + dn * 16, LDT);
          wmma::load_matrix_sync(qb, Qs + kk * 16 * LDT + dn * 16, LDT);
          wmma::mma_sync(dv[dn], pa, gb, dv[dn]);
          wmma::mma_sync(dk[dn], sa, qb, dk[dn]);
        }
      }
    }
  }
  __syncthreads();  // the tiles become staging space
  float* stage = reinterpret_cast<float*>(smem) + warp * 2 * 16 * (HS + 4);
  write_rows<T, HS>(dqkv + int64_t(b) * T_ * C3, C3, k0 + warp * 16, T_, stage, dk, scale,
                    koff, dv, 1.f, voff, true);
}

template <typename T, int HS>
__global__ void __launch_bounds__(128, kTc2MinBlocks<HS>) attention_dq_backward_kernel_tc2(
    T* dqkv, const T* dout, const T* qkv, const float* lse, const float* D, int T_, int NH, int G,
    float scale) {
  using L = TcLayout<HS>;
  constexpr int LDT = L::kLdT, LDP = L::kLdP, KS = HS / 16, JS = kTile / 16;
  extern __shared__ __align__(128) unsigned char smem[];
  T* Qs = reinterpret_cast<T*>(smem);
  T* Gs = Qs + kTile * LDT;
  T* Ks = Gs + kTile * LDT;
  T* Vs = Ks + kTile * LDT;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  unsigned char* wbase = smem + 4 * L::tile_bytes;
  unsigned char* mine = wbase + warp * Tc2Layout<HS>::warp_bytes;
  float* Sb = reinterpret_cast<float*>(mine);
  float* dPb = reinterpret_cast<float*>(mine + kBlockBytes);
  T* dS = reinterpret_cast<T*>(mine + 2 * kBlockBytes);
  float* Li = reinterpret_cast<float*>(wbase + kWarps * Tc2Layout<HS>::warp_bytes);
  float* Di = Li + kTile;
  const int C = NH * HS, C3 = (NH + 2 * G) * HS;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kTile;
  const int b = blockIdx.y / NH, h = blockIdx.y % NH, kvh = h / (NH / G);
  const T* base = qkv + int64_t(b) * T_ * C3 + h * HS;
  const T* kbase = qkv + int64_t(b) * T_ * C3 + C + kvh * HS;
  const T* vbase = kbase + G * HS;
  const int64_t r0w = (int64_t(b) * NH + h) * T_;
  load_tile<T, HS>(Qs, base, C3, q0, T_);
  load_tile<T, HS>(Gs, dout + int64_t(b) * T_ * C + h * HS, C, q0, T_);
  for (int e = threadIdx.x; e < kTile; e += blockDim.x) {
    bool in = q0 + e < T_;
    Li[e] = in ? lse[r0w + q0 + e] * kLog2e : 0.f;
    Di[e] = in ? D[r0w + q0 + e] : 0.f;
  }
  __syncthreads();
  FragA<T> qa[KS], ga[KS];
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
    wmma::load_matrix_sync(qa[kk], Qs + warp * 16 * LDT + kk * 16, LDT);
    wmma::load_matrix_sync(ga[kk], Gs + warp * 16 * LDT + kk * 16, LDT);
  }
  FragC dq[KS];
#pragma unroll
  for (int dn = 0; dn < KS; ++dn) wmma::fill_fragment(dq[dn], 0.f);
  const int cc = lane & 15, r0 = lane >> 4;
  const float sl2 = scale * kLog2e;
  const int last_key = min(T_ - 1, q0 + kTile - 1);
  for (int k0 = 0; k0 <= last_key; k0 += kTile) {
    __syncthreads();
    load_tile<T, HS>(Ks, kbase, C3, k0, T_);
    load_tile<T, HS>(Vs, vbase, C3, k0, T_);
    __syncthreads();
#pragma unroll
    for (int n = 0; n < JS; ++n) {
      FragC s, dp;
      wmma::fill_fragment(s, 0.f);
      wmma::fill_fragment(dp, 0.f);
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) {
        FragBc<T> kb, vb;
        wmma::load_matrix_sync(kb, Ks + n * 16 * LDT + kk * 16, LDT);
        wmma::load_matrix_sync(vb, Vs + n * 16 * LDT + kk * 16, LDT);
        wmma::mma_sync(s, qa[kk], kb, s);
        wmma::mma_sync(dp, ga[kk], vb, dp);
      }
      wmma::store_matrix_sync(Sb, s, kLdB, wmma::mem_row_major);
      wmma::store_matrix_sync(dPb, dp, kLdB, wmma::mem_row_major);
      __syncwarp();
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int rr = r0 + 2 * k, qr = warp * 16 + rr, i = q0 + qr, key = k0 + n * 16 + cc;
        const bool valid = key <= i && i < T_;
        const float p = valid ? exp2f(Sb[rr * kLdB + cc] * sl2 - Li[qr]) : 0.f;
        dS[rr * LDP + n * 16 + cc] = from_f<T>(p * (dPb[rr * kLdB + cc] - Di[qr]));
      }
      __syncwarp();
    }
#pragma unroll
    for (int kk = 0; kk < JS; ++kk) {
      FragA<T> sa;
      wmma::load_matrix_sync(sa, dS + kk * 16, LDP);
#pragma unroll
      for (int dn = 0; dn < KS; ++dn) {
        FragBr<T> kb;
        wmma::load_matrix_sync(kb, Ks + kk * 16 * LDT + dn * 16, LDT);
        wmma::mma_sync(dq[dn], sa, kb, dq[dn]);
      }
    }
  }
  __syncthreads();
  float* stage = reinterpret_cast<float*>(smem) + warp * 2 * 16 * (HS + 4);
  write_rows<T, HS>(dqkv + int64_t(b) * T_ * C3 + h * HS, C3, q0 + warp * 16, T_, stage, dq, scale,
                    0, dq, 0.f, 0, false);
}

// ---- launchers ----

namespace {

template <typename A, int HS>
void backward_tc2(A* dqkv, const A* dout, const A* qkv, const float* lse, const float* D, int64_t B,
                  int64_t T, int NH, int G, cudaStream_t stream) {
  const float scale = 1.f / sqrtf(float(HS));
  const size_t smem = Tc2Layout<HS>::smem_bytes;
  dim3 kv_grid(static_cast<unsigned>(ceil_div(T, kTile)), static_cast<unsigned>(B * G));
  dim3 grid(static_cast<unsigned>(ceil_div(T, kTile)), static_cast<unsigned>(B * NH));
  TRIPOD_CUDA_CHECK(cudaFuncSetAttribute(attention_dkdv_backward_kernel_tc2<A, HS>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  attention_dkdv_backward_kernel_tc2<A, HS><<<kv_grid, 32 * kWarps, smem, stream>>>(
      dqkv, dout, qkv, lse, D, static_cast<int>(T), NH, G, scale);
  TRIPOD_LAUNCH_CHECK();
  TRIPOD_CUDA_CHECK(cudaFuncSetAttribute(attention_dq_backward_kernel_tc2<A, HS>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  attention_dq_backward_kernel_tc2<A, HS><<<grid, 32 * kWarps, smem, stream>>>(
      dqkv, dout, qkv, lse, D, static_cast<int>(T), NH, G, scale);
  TRIPOD_LAUNCH_CHECK();
}

template <typename A>
void backward_tc2_hs(int HS, A* dqkv, const A* dout, const A* qkv, const float* lse, const float* D,
                     int64_t B, int64_t T, int NH, int G, cudaStream_t stream) {
  if (HS == 32) backward_tc2<A, 32>(dqkv, dout, qkv, lse, D, B, T, NH, G, stream);
  else if (HS == 64) backward_tc2<A, 64>(dqkv, dout, qkv, lse, D, B, T, NH, G, stream);
  else backward_tc2<A, 128>(dqkv, dout, qkv, lse, D, B, T, NH, G, stream);
}

}  // namespace

void attention_backward_tc2(void* dqkv, const void* dout, const void* qkv, const float* lse,
                            const float* D, int64_t B, int64_t T, int NH, int G, int HS, DType dt,
                            cudaStream_t stream) {
  if (dt == DType::BF16)
    backward_tc2_hs<bf16>(HS, static_cast<bf16*>(dqkv), static_cast<const bf16*>(dout),
                          static_cast<const bf16*>(qkv), lse, D, B, T, NH, G, stream);
  else
    backward_tc2_hs<f16>(HS, static_cast<f16*>(dqkv), static_cast<const f16*>(dout),
                         static_cast<const f16*>(qkv), lse, D, B, T, NH, G, stream);
}

}  // namespace tripod::backend::cuda
