// Causal attention through cuDNN's fused flash attention (the SDPA operation
// graphs of cudnn_attention.cpp, built with cudnn_graph.h): the bf16/f16 path
// of attention.cu when cuDNN 9 loads and a plan exists for the shape. Same
// contracts as attention.cuh: q/k/v are read in place from qkv (B, T,
// NH + 2G, HS) and dq/dk/dv written in place into dqkv through strides; lse (B, NH, T)
// f32 is cuDNN's softmax stats (natural-log log-sum-exp), so the forward's
// saved buffer feeds either backward. Internal to backend/cuda.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "tensor/dtype.h"

namespace tripod::backend::cuda {

// How cuDNN's backward forms dQ. kAuto: deterministic (dS spilled to the
// workspace, dQ as a plain matmul, cuDNN's deterministic algorithm on
// Hopper) while that workspace (B*NH*T^2*2 bytes) stays within 1 GiB, else
// f32 atomics.
enum class CudnnDq { kAuto, kDeterministic, kAtomic };

// True when cuDNN ran the op; false, with the reason in *why, when cuDNN is
// missing, the dtype/head size/alignment is not served, or no plan was found
// for this shape (the failure is cached; the caller falls back).
bool cudnn_attention_forward(void* out, float* lse, const void* qkv, int64_t B, int64_t T, int NH, int G,
                             int HS, DType dt, cudaStream_t stream, std::string* why);
// scratch: B * NH * T floats (cuDNN's rowsum of dout * out goes there).
bool cudnn_attention_backward(void* dqkv, const void* dout, const void* qkv, const void* out,
                              const float* lse, float* scratch, int64_t B, int64_t T, int NH, int G,
                              int HS, DType dt, CudnnDq dq, cudaStream_t stream, std::string* why);

// Context parallelism's block attention (contracts of context_parallel.cuh's
// attention_block_forward/backward): Q rows w.q_* of qkv (B, Tq, NH + 2G, HS)
// against K/V rows w.kv_* of kv (B, Tk, 2G, HS), causal only on the
// diagonal block. The forward writes the first block's rows in place and
// merges later ones by log-sum-exp (attention_block_merge); the backward
// takes the final out and lse rows and adds dQ, dK, dV into dqkv and dkv
// (add_rows). scratch: B * NH * w.q_len floats. Same fallbacks as above.
struct BlockWindow;
bool cudnn_attention_block_forward(void* out, float* lse, const void* qkv, const void* kv, int64_t B, int64_t Tq,
                                   int64_t Tk, int NH, int G, int HS, const BlockWindow& w, bool accumulate,
                                   DType dt, cudaStream_t stream, std::string* why);
bool cudnn_attention_block_backward(void* dqkv, void* dkv, const void* dout, const void* qkv, const void* kv,
                                    const void* out, const float* lse, float* scratch, int64_t B, int64_t Tq,
                                    int64_t Tk, int NH, int G, int HS, const BlockWindow& w, CudnnDq dq, DType dt,
                                    cudaStream_t stream, std::string* why);

// FP8 attention (backend/ops.h attention_fp8_forward/backward) on cuDNN's
// FP8 flash attention (cudnn_attention_fp8.cpp): qkv (B, T, NH + 2G, HS) and
// out (B, T, NH * HS) E4M3 codes, dout and dqkv in `grad` (E4M3 or E5M2);
// the scales are device floats (16-byte aligned). amax: where cuDNN writes
// (not accumulates) the amaxes, each 16-byte aligned: forward {S, O},
// backward {dP, dQ, dK, dV}. scratch: B * NH * T floats. False, with why,
// when cuDNN, the GPU or the head size is not served.
struct Fp8AttentionScales {
  const float *qkv_descale = nullptr, *s_scale = nullptr, *s_descale = nullptr, *o_scale = nullptr,
              *o_descale = nullptr, *dout_descale = nullptr, *dp_scale = nullptr, *dp_descale = nullptr,
              *dqkv_scale = nullptr;
  float* amax[4] = {nullptr, nullptr, nullptr, nullptr};
};
// Why cuDNN's FP8 attention does not serve this head size on the current
// device ("" when it does): no cuDNN, or fp8_attention_limitation.
std::string cudnn_fp8_attention_unserved(int64_t head_size);
bool cudnn_attention_fp8_forward(void* out, float* lse, const void* qkv, int64_t B, int64_t T, int NH, int G, int HS,
                                 const Fp8AttentionScales& s, cudaStream_t stream, std::string* why);
bool cudnn_attention_fp8_backward(void* dqkv, DType grad, const void* dout, const void* qkv, const void* out,
                                  const float* lse, float* scratch, int64_t B, int64_t T, int NH, int G, int HS,
                                  const Fp8AttentionScales& s, cudaStream_t stream, std::string* why);

// Logs `message` once per process (the attention path that runs).
void note_attention_path(const std::string& message);

}  // namespace tripod::backend::cuda
