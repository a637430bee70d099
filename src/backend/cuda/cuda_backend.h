// The CUDA backend: backend/ops.h on one GPU. CUDA-free header, so CPU code
// (the trainer, tests, benches) can create it without CUDA includes.
//
//   if (tripod::backend::cuda_device_count() > 0) {
//     auto be = tripod::backend::make_cuda_backend(0);   // "cuda:0 (NVIDIA H200)"
//     Tensor x = be->empty({N, C}, DType::BF16);
//   }
//
// Contract: all ops run in order on one non-blocking stream owned by the
// backend; host reads go through copy() + synchronize(). Activations may be
// f32, bf16 or f16; parameter gradients (dweight, dbias, dwte, dwpe) may be
// f32 (Megatron's fp32 grad accumulation) or the activation dtype. Library
// errors throw tripod::Error naming the call, file:line and device.
#pragma once

#include <memory>

#include "backend/ops.h"

namespace tripod::backend {

// Number of usable CUDA devices; 0 (never an error) when there is no driver
// or no GPU, so tests can skip cleanly.
int cuda_device_count();

// Required: a backend on `device`. Throws tripod::Error when it is missing.
std::unique_ptr<Backend> make_cuda_backend(int device = 0);

}  // namespace tripod::backend
