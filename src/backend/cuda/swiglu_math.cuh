// SwiGLU's elementwise math, one definition for the SwiGLU kernels
// (swiglu.cu) and the FP8 casts that compute SwiGLU on the fly
// (fp8_swiglu.cu), so both give the same bits. f32 math with expf (not
// __expf), as backend/cpu's swiglu.cpp.
#pragma once

namespace tripod::backend::cuda {

// silu(gate) * up.
__device__ __forceinline__ float swiglu_value(float gate, float up) { return gate / (1.f + expf(-gate)) * up; }

// d gate and d up of silu(gate) * up for the output gradient dy.
__device__ __forceinline__ void swiglu_grads(float gate, float up, float dy, float& dgate, float& dup) {
  const float sig = 1.f / (1.f + expf(-gate));
  dgate = dy * up * sig * (1.f + gate * (1.f - sig));
  dup = dy * gate * sig;
}

}  // namespace tripod::backend::cuda
