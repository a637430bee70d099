// Rotary position embedding, rotate-half convention, in place on the query
// and key heads of qkv. CUDA version of backend/cpu's rope.cpp.
//
// NOTE [RoPE kernel]
// Memory-bound: every Q/K element is read and written once. A thread takes
// VW consecutive pairs (x[i..i+VW), x[i+h..i+h+VW)) of one head of one row
// (16-byte loads and stores when h = rot_dim/2, HS and the pointer allow,
// VW = 1 otherwise), with cos/sin from a table (t, i) built on the host in
// double and rounded to f32 exactly as the CPU reference does, so the two
// backends rotate by the same f32 angles. The table is cached per
// (rot_dim, base) by the backend and grown with T. V and the dims >=
// rot_dim are not touched.
#include <cmath>

#include "backend/cuda/common.cuh"
#include "backend/cuda/rope.cuh"

namespace tripod::backend::cuda {

namespace {

template <typename T, int VW> struct alignas(sizeof(T) * VW) Vec {
  T v[VW];
};

// One thread per (row, head, pack of VW pairs); rows (b, t) of width W.
template <typename T, int VW>
__global__ void rope_kernel(T* qkv, const float* cs, const float* sn, int64_t rows, int T_, int heads, int HS,
                            int h, int W, float sign) {
  using V = Vec<T, VW>;
  const int packs = h / VW;
  const int64_t n = rows * heads * packs;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int p = static_cast<int>(e % packs);
    const int64_t rh = e / packs;
    const int head = static_cast<int>(rh % heads);
    const int64_t row = rh / heads;
    const int t = static_cast<int>(row % T_), i0 = p * VW;
    T* x = qkv + row * W + int64_t(head) * HS + i0;
    V a = *reinterpret_cast<const V*>(x), b = *reinterpret_cast<const V*>(x + h);
    const float* c = cs + int64_t(t) * h + i0;
    const float* s = sn + int64_t(t) * h + i0;
#pragma unroll
    for (int j = 0; j < VW; ++j) {
      const float x1 = to_f(a.v[j]), x2 = to_f(b.v[j]), cj = c[j], sj = sign * s[j];
      a.v[j] = from_f<T>(x1 * cj - x2 * sj);
      b.v[j] = from_f<T>(x2 * cj + x1 * sj);
    }
    *reinterpret_cast<V*>(x) = a;
    *reinterpret_cast<V*>(x + h) = b;
  }
}

}  // namespace

std::vector<float> rope_table(int64_t T, int64_t rot_dim, float base) {
  const int64_t h = rot_dim / 2;
  std::vector<float> t(static_cast<size_t>(2 * T * h));
  for (int64_t r = 0; r < T; ++r)
    for (int64_t i = 0; i < h; ++i) {
      const double theta = std::pow(static_cast<double>(base),
                                    -2.0 * static_cast<double>(i) / static_cast<double>(rot_dim));
      const double angle = static_cast<double>(r) * theta;
      t[r * h + i] = static_cast<float>(std::cos(angle));
      t[T * h + r * h + i] = static_cast<float>(std::sin(angle));
    }
  return t;
}

void rope(void* qkv, const float* cos_sin, int64_t table_rows, int64_t B, int64_t T, int NH, int G, int HS,
          int rot_dim, bool backward, DType dt, cudaStream_t stream) {
  if (B * T == 0) return;
  const int h = rot_dim / 2, heads = NH + G, W = (NH + 2 * G) * HS;
  const float* cs = cos_sin;
  const float* sn = cos_sin + table_rows * h;
  const float sign = backward ? -1.f : 1.f;
  constexpr int kBlock = 256;
  TRIPOD_DISPATCH_ACT(dt, A, {
    constexpr int VW = kPack<A>;
    const bool packed = h % VW == 0 && HS % VW == 0 && reinterpret_cast<uintptr_t>(qkv) % 16 == 0;
    const int64_t n = B * T * heads * (packed ? h / VW : h);
    if (packed)
      rope_kernel<A, VW><<<elementwise_grid(n, kBlock), kBlock, 0, stream>>>(
          static_cast<A*>(qkv), cs, sn, B * T, static_cast<int>(T), heads, HS, h, W, sign);
    else
      rope_kernel<A, 1><<<elementwise_grid(n, kBlock), kBlock, 0, stream>>>(
          static_cast<A*>(qkv), cs, sn, B * T, static_cast<int>(T), heads, HS, h, W, sign);
  });
  TRIPOD_LAUNCH_CHECK();
}

}  // namespace tripod::backend::cuda
