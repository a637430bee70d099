// Tensor-core (WMMA, bf16/f16) flash attention kernels used by attention.cu
// when the dtype, head size and alignment allow; see NOTE [Tensor-core
// attention] in attention_tc.cu. Internal to backend/cuda.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tensor/dtype.h"

namespace tripod::backend::cuda {

// bf16/f16, HS in {32, 64, 128}, 16-byte aligned rows and pointers.
bool attention_tc_supported(DType dt, int HS, int64_t C, const void* const* ptrs, int nptrs);

// qkv (B, T, (NH + 2G) * HS): [Q: NH heads | K: G | V: G] (G == NH: multi-head).
void attention_forward_tc(void* out, float* lse, const void* qkv, int64_t B, int64_t T, int NH, int G,
                          int HS, DType dt, cudaStream_t stream);
// Backward (attention_tc_bwd.cu). D (B, NH, T): row dot products
// dout . out, computed by the caller.
void attention_backward_tc2(void* dqkv, const void* dout, const void* qkv, const float* lse,
                            const float* D, int64_t B, int64_t T, int NH, int G, int HS, DType dt,
                            cudaStream_t stream);

// Which attention kernels run, from TRIPOD_CUDA_ATTENTION (read once; see
// attention.cu): unset/"auto": cuDNN's fused attention for bf16/f16 where
// cuDNN 9 loads and has a plan, else tensor cores with the second backward
// where supported, else CUDA cores; "cudnn": cuDNN or an error
// ("cudnn-det" / "cudnn-atomic" also force how dQ is formed); "wmma":
// tensor cores without cuDNN;
// "scalar": CUDA cores only (f32 math everywhere). A knob for benchmarks and
// bisecting, not for users.
enum class AttentionImpl { kAuto, kCudnn, kWmma, kScalar };
AttentionImpl attention_impl();

}  // namespace tripod::backend::cuda
