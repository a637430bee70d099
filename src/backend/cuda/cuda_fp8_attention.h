// The CUDA backend's FP8 attention ops (backend/ops.h attention_fp8_forward /
// backward): cuDNN's FP8 flash attention (cudnn_attention_fp8.cpp) plus what
// the op contract adds around it. Internal to backend/cuda.
#pragma once

#include <cuda_runtime.h>

#include "backend/ops.h"

namespace tripod::backend::cuda {

class Fp8AttentionRunner {
 public:
  void forward(Backend& be, cudaStream_t stream, Tensor& out, Tensor& lse, const Tensor& qkv,
               const Fp8AttentionMeta& m, int n_head, int n_kv_head);
  // scratch: B * n_head * T floats.
  void backward(Backend& be, cudaStream_t stream, float* scratch, Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                const Tensor& out, const Tensor& lse, const Fp8AttentionMeta& m, int n_head, int n_kv_head);

 private:
  // cuDNN writes its amaxes here (4 slots, 16 bytes apart), zeroed first;
  // they are folded into the op's accumulating amaxes.
  float* amax_slots(Backend& be, cudaStream_t stream);
  Tensor amax_;  // f32 (16)
  Tensor x_;     // the grouped-query backward's multi-head qkv and dqkv codes
};

}  // namespace tripod::backend::cuda
