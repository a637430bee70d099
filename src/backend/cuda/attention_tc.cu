// Flash-style causal attention on tensor cores through WMMA (16x16x16 bf16 or
// f16 fragments, f32 accumulation): the bf16/f16 path of attention.cu.
// Reference: Dao, FlashAttention-2 (2023), Algorithms 1 and 2.
//
// NOTE [Tensor-core attention]
// The forward kernel (here) and the two backward kernels (attention_tc_bwd.cu)
// use 4 warps per block and 64-row tiles; each warp owns
// 16 rows. Tiles of Q, K, V, dout are staged in shared memory with rows
// padded by 8 elements (16 bytes) against bank conflicts; every WMMA pointer
// stays 32-byte aligned (rows of 16 x padded width, columns of 16).
// Forward: per key tile, S = Q K^T goes to a per-warp f32 buffer; two lanes
// per row run the online softmax on it (log2 units), write P (bf16/f16) and
// rescale the f32 output rows, then O += P V on tensor cores. Q fragments
// are loaded once. The log-sum-exp is saved for the backward.
// Grouped-query attention (G K/V heads of NH % G == 0; G == NH is multi-head):
// qkv rows are [Q: NH | K: G | V: G] heads; query head h reads K/V head
// h / (NH/G), and the dK/dV kernel runs per K/V head, walking the query
// heads of its group in turn (summed in its fragments, no atomics).
// Backward, split as FlashAttention-2 without atomics: a dK/dV kernel (warp
// = 16 keys, loops over query tiles from the diagonal: S^T = K Q^T and
// dP^T = V dout^T, P^T and dS^T = P^T (dP^T - D) elementwise, then dV += P^T
// dout and dK += dS^T Q, accumulators in fragments), and a dQ kernel (warp =
// 16 queries, loops over key tiles up to the diagonal: S, dP, dS, then
// dQ += dS K). P and dS are rounded to bf16/f16 before their products, as in
// FlashAttention; the f32 row sums use the unrounded P. attention_tc_bwd.cu
// takes S and dP 16 columns at a time; the first version, with 16x64 per-warp
// buffers, is kept as a variant in bench/dev/cuda/attention_backward_tc1.cu.
#include <type_traits>

#include "backend/cuda/attention_tc.cuh"
#include "backend/cuda/attention_tc_common.cuh"

namespace tripod::backend::cuda {

// ---- kernels ----

template <typename T, int HS>
__global__ void __launch_bounds__(128) attention_forward_kernel_tc(T* out, float* lse, const T* qkv,
                                                                   int T_, int NH, int G, float scale) {
  using L = TcLayout<HS>;
  constexpr int LDT = L::kLdT, LDF = L::kLdF, LDP = L::kLdP, KS = HS / 16;
  extern __shared__ __align__(128) unsigned char smem[];
  T* Qs = reinterpret_cast<T*>(smem);
  T* Ks = Qs + kTile * LDT;
  T* Vs = Ks + kTile * LDT;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* S = reinterpret_cast<float*>(smem + 3 * L::tile_bytes) + warp * 16 * LDF;
  float* O = reinterpret_cast<float*>(smem + 3 * L::tile_bytes + kWarps * L::warp_f32_bytes) + warp * 16 * LDF;
  T* P = reinterpret_cast<T*>(smem + 3 * L::tile_bytes + 2 * kWarps * L::warp_f32_bytes) + warp * 16 * LDP;
  const int C = NH * HS, C3 = (NH + 2 * G) * HS;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kTile;
  const int b = blockIdx.y / NH, h = blockIdx.y % NH, kvh = h / (NH / G);
  const T* base = qkv + int64_t(b) * T_ * C3 + h * HS;
  const T* kbase = qkv + int64_t(b) * T_ * C3 + C + kvh * HS;
  const T* vbase = kbase + G * HS;
  load_tile<T, HS>(Qs, base, C3, q0, T_);
  for (int e = lane; e < 16 * LDF; e += 32) O[e] = 0.f;
  __syncthreads();
  FragA<T> qa[KS];
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) wmma::load_matrix_sync(qa[kk], Qs + warp * 16 * LDT + kk * 16, LDT);
  const int r = lane >> 1, half = lane & 1;
  const int i = q0 + warp * 16 + r;
  const float sl2 = scale * kLog2e;
  float m = -INFINITY, l = 0.f;
  const int last_key = min(T_ - 1, q0 + kTile - 1);
  for (int k0 = 0; k0 <= last_key; k0 += kTile) {
    __syncthreads();
    load_tile<T, HS>(Ks, kbase, C3, k0, T_);
    load_tile<T, HS>(Vs, vbase, C3, k0, T_);
    __syncthreads();
#pragma unroll
    for (int n = 0; n < kTile / 16; ++n) {
      FragC c;
      wmma::fill_fragment(c, 0.f);
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) {
        FragBc<T> kb;
        wmma::load_matrix_sync(kb, Ks + n * 16 * LDT + kk * 16, LDT);
        wmma::mma_sync(c, qa[kk], kb, c);
      }
      wmma::store_matrix_sync(S + n * 16, c, LDF, wmma::mem_row_major);
    }
    __syncwarp();
    float s[kTile / 2], mt = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < kTile / 2; ++jj) {
      int j = stagger(jj, r, half), key = k0 + j;
      s[jj] = (key <= i && key < T_) ? S[r * LDF + j] * sl2 : -INFINITY;
      mt = fmaxf(mt, s[jj]);
    }
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
    const float mnew = fmaxf(m, mt), msafe = mnew == -INFINITY ? 0.f : mnew;
    const float corr = exp2f(m - msafe);
    float ls = 0.f;
#pragma unroll
    for (int jj = 0; jj < kTile / 2; ++jj) {
      float p = exp2f(s[jj] - msafe);
      ls += p;
      P[r * LDP + stagger(jj, r, half)] = from_f<T>(p);
    }
    ls += __shfl_xor_sync(0xffffffffu, ls, 1);
    l = l * corr + ls;
    m = mnew;
    for (int dd = 0; dd < HS / 2; ++dd) O[r * LDF + half * (HS / 2) + ((dd + r + 16 * half) & (HS / 2 - 1))] *= corr;
    __syncwarp();
    FragA<T> pa[kTile / 16];
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) wmma::load_matrix_sync(pa[kk], P + kk * 16, LDP);
#pragma unroll
    for (int dn = 0; dn < KS; ++dn) {
      FragC c;
      wmma::load_matrix_sync(c, O + dn * 16, LDF, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kTile / 16; ++kk) {
        FragBr<T> vb;
        wmma::load_matrix_sync(vb, Vs + kk * 16 * LDT + dn * 16, LDT);
        wmma::mma_sync(c, pa[kk], vb, c);
      }
      wmma::store_matrix_sync(O + dn * 16, c, LDF, wmma::mem_row_major);
    }
    __syncwarp();
  }
  if (i >= T_) return;
  const float inv = l > 0.f ? 1.f / l : 0.f;
  T* y = out + (int64_t(b) * T_ + i) * C + h * HS;
  for (int d = half * (HS / 2); d < (half + 1) * (HS / 2); ++d) y[d] = from_f<T>(O[r * LDF + d] * inv);
  if (half == 0) lse[(int64_t(b) * NH + h) * T_ + i] = (m + log2f(l)) * kLn2;
}

// ---- launchers ----

namespace {

template <typename K>
void set_smem(K kernel, size_t bytes) {
  TRIPOD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

template <typename A, int HS>
void forward_tc(A* out, float* lse, const A* qkv, int64_t B, int64_t T, int NH, int G, cudaStream_t stream) {
  using L = TcLayout<HS>;
  size_t smem = 3 * L::tile_bytes + kWarps * (2 * L::warp_f32_bytes + L::warp_p_bytes);
  set_smem(attention_forward_kernel_tc<A, HS>, smem);
  dim3 grid(static_cast<unsigned>(ceil_div(T, kTile)), static_cast<unsigned>(B * NH));
  attention_forward_kernel_tc<A, HS><<<grid, 32 * kWarps, smem, stream>>>(
      out, lse, qkv, static_cast<int>(T), NH, G, 1.f / sqrtf(float(HS)));
  TRIPOD_LAUNCH_CHECK();
}

}  // namespace

#define TRIPOD_DISPATCH_TC(dt, HS_, ...)                                                        \
  do {                                                                                         \
    auto run_ = [&](auto a_tag, auto hs_tag) {                                                  \
      using A = decltype(a_tag);                                                               \
      constexpr int kHS = decltype(hs_tag)::value;                                             \
      __VA_ARGS__;                                                                             \
    };                                                                                         \
    auto hs_ = [&](auto a_tag) {                                                               \
      if (HS_ == 32) run_(a_tag, std::integral_constant<int, 32>{});                           \
      else if (HS_ == 64) run_(a_tag, std::integral_constant<int, 64>{});                      \
      else run_(a_tag, std::integral_constant<int, 128>{});                                    \
    };                                                                                         \
    if (dt == DType::BF16) hs_(bf16{});                                                        \
    else hs_(f16{});                                                                           \
  } while (0)

bool attention_tc_supported(DType dt, int HS, int64_t C, const void* const* ptrs, int nptrs) {
  if (dt != DType::BF16 && dt != DType::F16) return false;
  if (HS != 32 && HS != 64 && HS != 128) return false;
  if (C % 8 != 0) return false;  // 16-byte rows of out/dout and of each Q/K/V slice
  for (int k = 0; k < nptrs; ++k)
    if (reinterpret_cast<uintptr_t>(ptrs[k]) % 16 != 0) return false;
  return true;
}

void attention_forward_tc(void* out, float* lse, const void* qkv, int64_t B, int64_t T, int NH, int G,
                          int HS, DType dt, cudaStream_t stream) {
  TRIPOD_DISPATCH_TC(dt, HS, forward_tc<A, kHS>(static_cast<A*>(out), lse,
                                                static_cast<const A*>(qkv), B, T, NH, G, stream));
}

}  // namespace tripod::backend::cuda
