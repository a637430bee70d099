// Tensor-core attention backward, first version ("tc1"), kept as a dev
// variant in the llm.c dev/cuda manner: the kernels, their launcher and a
// main that checks them against the CPU reference and times them next to the
// product's backward (src/backend/cuda/attention_tc_bwd.cu, the default).
// Not part of the product: built only by the bench_dev target.
//
// What differs from the product kernels: S and dP go through a 16x64 per-warp
// f32 buffer (the product takes them 16 columns at a time through a 16x16
// one), so fewer blocks fit on a multiprocessor. See NOTE [Tensor-core
// attention] in src/backend/cuda/attention_tc.cu for the shared design.
//
//   cmake --build build --target bench_dev
//   build/bench/dev/attention_backward_tc1 [B T NH HS]      (bf16; default 2 512 12 64)
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/attention_tc_common.cuh"
#include "backend/cuda/cuda_backend.h"

namespace tripod::backend::cuda {
namespace {

template <typename K>
void set_smem(K kernel, size_t bytes) {
  TRIPOD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

template <typename T, int HS>
__global__ void __launch_bounds__(128) attention_dkdv_backward_kernel_tc(
    T* dqkv, const T* dout, const T* qkv, const float* lse, const float* D, int T_, int NH,
    float scale) {
  using L = TcLayout<HS>;
  constexpr int LDT = L::kLdT, LDF = L::kLdF, LDP = L::kLdP, KS = HS / 16, QS = kTile / 16;
  extern __shared__ __align__(128) unsigned char smem[];
  T* Ks = reinterpret_cast<T*>(smem);
  T* Vs = Ks + kTile * LDT;
  T* Qs = Vs + kTile * LDT;
  T* Gs = Qs + kTile * LDT;  // dout tile
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  unsigned char* wbase = smem + 4 * L::tile_bytes;
  float* St = reinterpret_cast<float*>(wbase) + warp * 16 * LDF;
  float* dPt = reinterpret_cast<float*>(wbase + kWarps * L::warp_f32_bytes) + warp * 16 * LDF;
  T* Pt = reinterpret_cast<T*>(wbase + 2 * kWarps * L::warp_f32_bytes) + warp * 16 * LDP;
  T* dSt = reinterpret_cast<T*>(wbase + 2 * kWarps * L::warp_f32_bytes + kWarps * L::warp_p_bytes) + warp * 16 * LDP;
  float* Ls = reinterpret_cast<float*>(wbase + 2 * kWarps * (L::warp_f32_bytes + L::warp_p_bytes));
  float* Ds = Ls + kTile;
  const int C = NH * HS, C3 = 3 * C;
  const int k0 = blockIdx.x * kTile;
  const int b = blockIdx.y / NH, h = blockIdx.y % NH;
  const T* base = qkv + int64_t(b) * T_ * C3 + h * HS;
  const T* gbase = dout + int64_t(b) * T_ * C + h * HS;
  const float* lrow = lse + (int64_t(b) * NH + h) * T_;
  const float* drow = D + (int64_t(b) * NH + h) * T_;
  load_tile<T, HS>(Ks, base + C, C3, k0, T_);
  load_tile<T, HS>(Vs, base + 2 * C, C3, k0, T_);
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
  const int r = lane >> 1, half = lane & 1;
  const int j = k0 + warp * 16 + r;  // this lane's key row
  const float sl2 = scale * kLog2e;
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
      wmma::store_matrix_sync(St + n * 16, s, LDF, wmma::mem_row_major);
      wmma::store_matrix_sync(dPt + n * 16, dp, LDF, wmma::mem_row_major);
    }
    __syncwarp();
#pragma unroll 8
    for (int jj = 0; jj < kTile / 2; ++jj) {
      int ii = stagger(jj, r, half), qi = q0 + ii;
      bool valid = qi >= j && qi < T_ && j < T_;
      float p = valid ? exp2f(St[r * LDF + ii] * sl2 - Ls[ii]) : 0.f;
      Pt[r * LDP + ii] = from_f<T>(p);
      dSt[r * LDP + ii] = from_f<T>(p * (dPt[r * LDF + ii] - Ds[ii]));
    }
    __syncwarp();
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
  // Fragments -> per-warp f32 rows -> dqkv (K and V parts).
#pragma unroll
  for (int dn = 0; dn < KS; ++dn) {
    wmma::store_matrix_sync(St + dn * 16, dk[dn], LDF, wmma::mem_row_major);
    wmma::store_matrix_sync(dPt + dn * 16, dv[dn], LDF, wmma::mem_row_major);
  }
  __syncwarp();
  if (j >= T_) return;
  T* row = dqkv + (int64_t(b) * T_ + j) * C3 + h * HS;
  for (int d = half * (HS / 2); d < (half + 1) * (HS / 2); ++d) {
    row[C + d] = from_f<T>(St[r * LDF + d] * scale);
    row[2 * C + d] = from_f<T>(dPt[r * LDF + d]);
  }
}

template <typename T, int HS>
__global__ void __launch_bounds__(128) attention_dq_backward_kernel_tc(
    T* dqkv, const T* dout, const T* qkv, const float* lse, const float* D, int T_, int NH,
    float scale) {
  using L = TcLayout<HS>;
  constexpr int LDT = L::kLdT, LDF = L::kLdF, LDP = L::kLdP, KS = HS / 16, JS = kTile / 16;
  extern __shared__ __align__(128) unsigned char smem[];
  T* Qs = reinterpret_cast<T*>(smem);
  T* Gs = Qs + kTile * LDT;
  T* Ks = Gs + kTile * LDT;
  T* Vs = Ks + kTile * LDT;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  unsigned char* wbase = smem + 4 * L::tile_bytes;
  float* S = reinterpret_cast<float*>(wbase) + warp * 16 * LDF;
  float* dP = reinterpret_cast<float*>(wbase + kWarps * L::warp_f32_bytes) + warp * 16 * LDF;
  T* dS = reinterpret_cast<T*>(wbase + 2 * kWarps * L::warp_f32_bytes) + warp * 16 * LDP;
  const int C = NH * HS, C3 = 3 * C;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kTile;
  const int b = blockIdx.y / NH, h = blockIdx.y % NH;
  const T* base = qkv + int64_t(b) * T_ * C3 + h * HS;
  load_tile<T, HS>(Qs, base, C3, q0, T_);
  load_tile<T, HS>(Gs, dout + int64_t(b) * T_ * C + h * HS, C, q0, T_);
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
  const int r = lane >> 1, half = lane & 1;
  const int i = q0 + warp * 16 + r;
  const int64_t ri = (int64_t(b) * NH + h) * T_ + i;
  const float l2 = i < T_ ? lse[ri] * kLog2e : 0.f, Di = i < T_ ? D[ri] : 0.f;
  const float sl2 = scale * kLog2e;
  const int last_key = min(T_ - 1, q0 + kTile - 1);
  for (int k0 = 0; k0 <= last_key; k0 += kTile) {
    __syncthreads();
    load_tile<T, HS>(Ks, base + C, C3, k0, T_);
    load_tile<T, HS>(Vs, base + 2 * C, C3, k0, T_);
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
      wmma::store_matrix_sync(S + n * 16, s, LDF, wmma::mem_row_major);
      wmma::store_matrix_sync(dP + n * 16, dp, LDF, wmma::mem_row_major);
    }
    __syncwarp();
#pragma unroll 8
    for (int jj = 0; jj < kTile / 2; ++jj) {
      int jc = stagger(jj, r, half), key = k0 + jc;
      bool valid = key <= i && i < T_;
      float p = valid ? exp2f(S[r * LDF + jc] * sl2 - l2) : 0.f;
      dS[r * LDP + jc] = from_f<T>(p * (dP[r * LDF + jc] - Di));
    }
    __syncwarp();
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
#pragma unroll
  for (int dn = 0; dn < KS; ++dn) wmma::store_matrix_sync(S + dn * 16, dq[dn], LDF, wmma::mem_row_major);
  __syncwarp();
  if (i >= T_) return;
  T* row = dqkv + (int64_t(b) * T_ + i) * C3 + h * HS;
  for (int d = half * (HS / 2); d < (half + 1) * (HS / 2); ++d) row[d] = from_f<T>(S[r * LDF + d] * scale);
}

template <typename A, int HS>
void backward_tc(A* dqkv, const A* dout, const A* qkv, const float* lse, const float* D, int64_t B,
                 int64_t T, int NH, cudaStream_t stream) {
  using L = TcLayout<HS>;
  const float scale = 1.f / sqrtf(float(HS));
  dim3 grid(static_cast<unsigned>(ceil_div(T, kTile)), static_cast<unsigned>(B * NH));
  size_t kv_smem = 4 * L::tile_bytes + kWarps * 2 * (L::warp_f32_bytes + L::warp_p_bytes) + 2 * kTile * 4;
  set_smem(attention_dkdv_backward_kernel_tc<A, HS>, kv_smem);
  attention_dkdv_backward_kernel_tc<A, HS><<<grid, 32 * kWarps, kv_smem, stream>>>(
      dqkv, dout, qkv, lse, D, static_cast<int>(T), NH, scale);
  TRIPOD_LAUNCH_CHECK();
  size_t q_smem = 4 * L::tile_bytes + kWarps * (2 * L::warp_f32_bytes + L::warp_p_bytes);
  set_smem(attention_dq_backward_kernel_tc<A, HS>, q_smem);
  attention_dq_backward_kernel_tc<A, HS><<<grid, 32 * kWarps, q_smem, stream>>>(
      dqkv, dout, qkv, lse, D, static_cast<int>(T), NH, scale);
  TRIPOD_LAUNCH_CHECK();
}

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

void attention_backward_tc1(void* dqkv, const void* dout, const void* qkv, const float* lse,
                           const float* D, int64_t B, int64_t T, int NH, int HS, DType dt,
                           cudaStream_t stream) {
  TRIPOD_DISPATCH_TC(dt, HS, backward_tc<A, kHS>(static_cast<A*>(dqkv), static_cast<const A*>(dout),
                                                 static_cast<const A*>(qkv), lse, D, B, T, NH, stream));
}

}  // namespace
}  // namespace tripod::backend::cuda

using namespace tripod;

namespace {

std::vector<float> download(backend::Backend& be, const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), t.dtype()), f = Tensor::empty(t.shape(), DType::F32);
  be.copy(h, t);
  be.synchronize();
  if (t.dtype() == DType::F32) return {h.data<float>(), h.data<float>() + h.numel()};
  backend::make_cpu_backend()->cast(f, h);
  return {f.data<float>(), f.data<float>() + f.numel()};
}

// max |got - want| and ||got - want|| / ||want||.
void report(const char* name, const std::vector<float>& got, const std::vector<float>& want, double us) {
  double err2 = 0, ref2 = 0, max_abs = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = double(got[i]) - want[i];
    err2 += e * e;
    ref2 += double(want[i]) * want[i];
    max_abs = std::fmax(max_abs, std::fabs(e));
  }
  std::printf("%-34s %9.1f us   max_abs %.3e   rel_l2 %.3e\n", name, us, max_abs, std::sqrt(err2 / ref2));
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
  return 1000.0 * ms / iters;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t B = argc > 1 ? std::atoll(argv[1]) : 2, T = argc > 2 ? std::atoll(argv[2]) : 512;
  int NH = argc > 3 ? std::atoi(argv[3]) : 12, HS = argc > 4 ? std::atoi(argv[4]) : 64;
  if (backend::cuda_device_count() == 0) {
    std::printf("no CUDA device visible\n");
    return 0;
  }
  const int64_t C = int64_t(NH) * HS;
  auto gpu = backend::make_cuda_backend(0);
  auto cpu = backend::make_cpu_backend();
  std::printf("attention backward, bf16, B=%lld T=%lld NH=%d HS=%d on %s\n", (long long)B, (long long)T, NH, HS,
              gpu->name().c_str());

  // Inputs rounded to bf16, so the f32 CPU reference sees the same values.
  std::mt19937_64 rng(1234);
  std::normal_distribution<float> n(0.f, 1.f);
  auto random_bf16 = [&](const Shape& s, Tensor& host_f32) {
    host_f32 = Tensor::empty(s, DType::F32);
    for (int64_t i = 0; i < host_f32.numel(); ++i) host_f32.data<float>()[i] = n(rng);
    Tensor h16 = Tensor::empty(s, DType::BF16);
    cpu->cast(h16, host_f32);
    cpu->cast(host_f32, h16);
    Tensor d = gpu->empty(s, DType::BF16);
    gpu->copy(d, h16);
    return d;
  };
  Tensor qkv_c, dout_c;
  Tensor qkv = random_bf16({B, T, 3 * C}, qkv_c), dout = random_bf16({B, T, C}, dout_c);

  // CPU reference (f32).
  Tensor out_c = cpu->empty({B, T, C}, DType::F32), lse_c = cpu->empty({B, NH, T}, DType::F32);
  Tensor dqkv_c = cpu->empty({B, T, 3 * C}, DType::F32);
  cpu->attention_forward(out_c, lse_c, qkv_c, NH);
  cpu->attention_backward(dqkv_c, dout_c, qkv_c, out_c, lse_c, NH);
  const std::vector<float> want(dqkv_c.data<float>(), dqkv_c.data<float>() + dqkv_c.numel());

  // The product forward, then D = rowdot(dout, out) for tc1 (the product's
  // backward computes its own).
  Tensor out = gpu->empty({B, T, C}, DType::BF16), lse = gpu->empty({B, NH, T}, DType::F32);
  gpu->attention_forward(out, lse, qkv, NH);
  const std::vector<float> o = download(*gpu, out), g = download(*gpu, dout);
  Tensor Dh = Tensor::empty({B, NH, T}, DType::F32);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int h = 0; h < NH; ++h) {
        double s = 0;
        for (int d = 0; d < HS; ++d) s += double(o[((b * T + t) * NH + h) * HS + d]) * g[((b * T + t) * NH + h) * HS + d];
        Dh.data<float>()[(b * NH + h) * T + t] = float(s);
      }
  Tensor D = gpu->empty({B, NH, T}, DType::F32);
  gpu->copy(D, Dh);

  Tensor dqkv = gpu->empty({B, T, 3 * C}, DType::BF16);
  auto stream = static_cast<cudaStream_t>(gpu->native_stream());
  double us = time_us(*gpu, [&] {
    backend::cuda::attention_backward_tc1(dqkv.raw(), dout.raw(), qkv.raw(), lse.data<float>(), D.data<float>(), B, T,
                                          NH, HS, DType::BF16, stream);
  });
  report("tc1 (this file)", download(*gpu, dqkv), want, us);
  us = time_us(*gpu, [&] { gpu->attention_backward(dqkv, dout, qkv, out, lse, NH); });
  report("product (attention_backward)", download(*gpu, dqkv), want, us);
  return 0;
}
