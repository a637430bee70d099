// FP8 cast + transpose, first version ("tile32"), kept as a dev variant in the
// llm.c dev/cuda manner: the kernel, its launcher and a main that checks it
// and the product's fp8_cast_transpose against the CPU reference (every code
// and amax bit for bit) and times both, in GB/s of bytes read + written.
// Not part of the product: built only by the bench_dev target.
//
// tile32: 32 x 32 tiles, blocks of 32 x 8 threads, one element (one byte
// written to out and to out_t) per thread and step. The product
// (src/backend/cuda/fp8.cu, NOTE [FP8 cast + transpose]) takes 8 x 8
// sub-tiles per thread with 16-byte loads and 8-byte stores on both outputs
// and keeps this layout only for shapes that are not multiples of 8.
//
//   cmake --build build --target bench_dev
//   build/bench/dev/fp8_cast_transpose_tile32 [R C [bf16|f16|f32 [e4m3|e5m2]]]
//   (default: the fp8_gemm_bench cast shapes and a few cut ones, bf16, e4m3)
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/fp8_math.cuh"

namespace tripod::backend::cuda {
namespace {

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
    __syncthreads();
  }
  commit_amax(m, amax);
}

}  // namespace

void fp8_cast_transpose_tile32(void* out, void* out_t, DType fp8, float* amax, const void* in, DType dt,
                               const float* scale, int64_t R, int64_t C, cudaStream_t stream) {
  auto* o = static_cast<uint8_t*>(out);
  auto* ot = static_cast<uint8_t*>(out_t);
  const dim3 block(kTile, kTileRows);
  const dim3 grid(static_cast<unsigned>(ceil_div(C, kTile)),
                  static_cast<unsigned>(std::min<int64_t>(ceil_div(R, kTile), 65535)));
  TRIPOD_DISPATCH_ACT(dt, T, {
    const T* x = static_cast<const T*>(in);
    if (fp8 == DType::E5M2)
      cast_transpose_kernel_tile32<T, true><<<grid, block, 0, stream>>>(o, ot, amax, x, scale, R, C);
    else cast_transpose_kernel_tile32<T, false><<<grid, block, 0, stream>>>(o, ot, amax, x, scale, R, C);
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

// One shape: random N(0, 4) inputs with NaN, inf, zeros and huge values at
// the front, rounded to dt; the CPU reference on their f32 values; both
// kernels checked and timed.
// Returns false on a mismatch.
bool run(backend::Backend& gpu, backend::Backend& cpu, int64_t R, int64_t C, DType dt, DType fp8) {
  std::mt19937_64 rng(R * 7919 + C);
  std::normal_distribution<float> n(0.f, 4.f);
  Tensor h32 = Tensor::empty({R, C}, DType::F32);
  float* h = h32.data<float>();
  for (int64_t i = 0; i < R * C; ++i) h[i] = n(rng);
  const float special[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity(), 0.f, -0.f,
                           1e6f, -464.f, 1e-30f, 61440.f};
  for (size_t i = 0; i < sizeof(special) / sizeof(float) && int64_t(i) < R * C; ++i) h[i] = special[i];
  Tensor hx = Tensor::empty({R, C}, dt);  // the input; h32 becomes its f32 values (the CPU computes in f32)
  if (dt == DType::F32) cpu.copy(hx, h32);
  else {
    cpu.cast(hx, h32);
    cpu.cast(h32, hx);
  }
  Tensor hscale = Tensor::empty({1}, DType::F32), hamax = Tensor::empty({1}, DType::F32);
  hscale.data<float>()[0] = fp8 == DType::E4M3 ? 30.7f : 2001.3f;
  hamax.data<float>()[0] = 0.f;
  Tensor want = Tensor::empty({R, C}, fp8), want_t = Tensor::empty({C, R}, fp8);
  cpu.fp8_cast_transpose(want, want_t, hamax, h32, hscale);
  const std::vector<uint8_t> w = bytes(cpu, want), wt = bytes(cpu, want_t), wa = bytes(cpu, hamax);

  Tensor x = gpu.empty({R, C}, dt), scale = gpu.empty({1}, DType::F32), amax = gpu.empty({1}, DType::F32);
  Tensor out = gpu.empty({R, C}, fp8), out_t = gpu.empty({C, R}, fp8);
  gpu.copy(x, hx);
  gpu.copy(scale, hscale);
  auto stream = static_cast<cudaStream_t>(gpu.native_stream());
  const double gb = (double(R) * C * (dtype_size(dt) + 2)) * 1e-3;  // bytes / 1e3: GB/s from us
  bool ok = true;
  auto check = [&](const char* name, const auto& fn) {
    gpu.zero(amax);
    gpu.zero(out);
    gpu.zero(out_t);
    fn();
    const bool same = bytes(gpu, out) == w && bytes(gpu, out_t) == wt && bytes(gpu, amax) == wa;
    const double us = time_us(gpu, fn);
    std::printf("  %-30s %9.1f us %7.0f GB/s   %s\n", name, us, gb / us, same ? "bit-exact" : "MISMATCH");
    ok = ok && same;
  };
  std::printf("(%lld, %lld) %s -> %s\n", (long long)R, (long long)C, dtype_name(dt), dtype_name(fp8));
  check("tile32 (this file)", [&] {
    backend::cuda::fp8_cast_transpose_tile32(out.raw(), out_t.raw(), fp8, amax.data<float>(), x.raw(), dt,
                                             scale.data<float>(), R, C, stream);
  });
  check("product (fp8_cast_transpose)", [&] { gpu.fp8_cast_transpose(out, out_t, amax, x, scale); });
  return ok;
}

DType parse(const char* s) {
  for (DType d : {DType::BF16, DType::F16, DType::F32, DType::E4M3, DType::E5M2})
    if (!std::strcmp(s, dtype_name(d))) return d;
  std::fprintf(stderr, "unknown dtype %s (bf16, f16, f32, e4m3, e5m2)\n", s);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (backend::cuda_device_count() == 0) {
    std::printf("no CUDA device visible\n");
    return 0;
  }
  auto gpu = backend::make_cuda_backend(0);
  auto cpu = backend::make_cpu_backend();
  std::printf("fp8_cast_transpose on %s (GB/s: input + two FP8 outputs)\n", gpu->name().c_str());
  bool ok = true;
  if (argc > 2) {
    const DType dt = argc > 3 ? parse(argv[3]) : DType::BF16, fp8 = argc > 4 ? parse(argv[4]) : DType::E4M3;
    ok = run(*gpu, *cpu, std::atoll(argv[1]), std::atoll(argv[2]), dt, fp8);
  } else {
    struct S { int64_t r, c; DType dt, fp8; };
    for (S s : {S{8192, 14336, DType::BF16, DType::E4M3}, S{8192, 4096, DType::BF16, DType::E4M3},
                S{16384, 1600, DType::BF16, DType::E4M3}, S{16384, 6400, DType::BF16, DType::E5M2},
                S{4096, 4096, DType::F32, DType::E4M3}, S{4096, 4096, DType::F16, DType::E5M2},
                S{1000, 1032, DType::BF16, DType::E4M3}, S{8, 24, DType::BF16, DType::E5M2},
                S{67, 100, DType::BF16, DType::E4M3}, S{1, 48, DType::F32, DType::E4M3}})
      ok = run(*gpu, *cpu, s.r, s.c, s.dt, s.fp8) && ok;
  }
  std::printf(ok ? "all bit-exact\n" : "MISMATCH\n");
  return ok ? 0 : 1;
}
