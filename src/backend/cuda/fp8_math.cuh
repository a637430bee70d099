// The element rules of the FP8 kernels (fp8.cu, fp8_swiglu.cu), one
// definition so every cast gives the same codes (tensor/dtype.h's
// f32_to_fp8 / fp8_to_f32 bit for bit):
//  - to FP8: __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...) (one cvt.rn.satfinite
//    instruction on sm_89+), with NaN mapped to 0x7f first, so the NaN code
//    does not depend on the instruction's NaN sign handling;
//  - from FP8: exact through f16 (every E4M3 and E5M2 value is an f16 value);
//    NaN codes give the positive quiet NaN;
//  - amax: a block maximum of each thread's fmaxf over |x| (NaN skipped),
//    then one atomicMax on the float's bits (order-preserving for values >= 0);
//  - block scaling's scale (fp8_block.cu): block_scale, tensor/dtype.h's
//    fp8_block_scale in the same f32 steps.
#pragma once

#include <cuda_fp8.h>

#include <cfloat>
#include <cstdint>

#include "backend/cuda/common.cuh"

namespace tripod::backend::cuda {

template <bool kE5M2>
__device__ __forceinline__ uint8_t to_fp8(float x) {
  if (isnan(x)) return 0x7f;
  return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, kE5M2 ? __NV_E5M2 : __NV_E4M3);
}

__device__ __forceinline__ float from_fp8(uint8_t c, bool e5m2) {
  const float f = __half2float(__half(__nv_cvt_fp8_to_halfraw(c, e5m2 ? __NV_E5M2 : __NV_E4M3)));
  return isnan(f) ? __int_as_float(0x7fc00000) : f;
}

// The power of two at or below fp8_max / amax (1 for amax 0, inf or NaN;
// 2^127 when the quotient overflows), as tensor/dtype.cpp's fp8_block_scale:
// the correctly rounded quotient (__fdiv_rn, whatever the division flags)
// with its mantissa cleared. The quotient is normal (fp8_max >= 448 and
// amax <= FLT_MAX), so clearing the mantissa is the floor power of two.
__device__ __forceinline__ float block_scale(float amax, float fp8_max) {
  if (!(amax > 0.f) || isinf(amax)) return 1.f;
  float s = __fdiv_rn(fp8_max, amax);
  if (isinf(s)) s = FLT_MAX;
  return __int_as_float(__float_as_int(s) & static_cast<int>(0xff800000u));
}

// Block maximum of m (>= 0) over any block shape, then amax = max(amax, it).
// Every thread of the block must call it (it has a barrier).
__device__ __forceinline__ void commit_amax(float m, float* amax) {
  __shared__ float part[32];
  const int tid = threadIdx.y * blockDim.x + threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int warps = blockDim.x * blockDim.y / 32;
  m = warp_max(m);
  if (lane == 0) part[warp] = m;
  __syncthreads();
  if (warp == 0) {
    m = warp_max(lane < warps ? part[lane] : 0.f);
    if (lane == 0) atomicMax(reinterpret_cast<int*>(amax), __float_as_int(m));
  }
}

}  // namespace tripod::backend::cuda
