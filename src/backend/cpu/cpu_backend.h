// The CPU backend: backend/ops.h on the host, in f32 or f64. The readable
// reference (the specification) every other backend is tested against
// (tests/backend_ops); f64 is the reference precision. bf16/f16 activations
// are emulated: f32 kernels on widened operands, outputs rounded back
// (backend/cpu/half.h), so --bf16 and --fp16 jobs run on CPU too.
//
//   auto be = tripod::backend::make_cpu_backend();   // "cpu"
//   Tensor x = be->empty({N, C}, DType::F32);
#pragma once

#include <memory>

#include "backend/ops.h"

namespace tripod::backend {

std::unique_ptr<Backend> make_cpu_backend();

// CPU threads (OpenMP and OpenBLAS) per process: OMP_NUM_THREADS when set,
// else the cores divided among the ranks on this node (as torchrun does), so
// 8 ranks on 2 cores do not spin 16 threads against each other. Returns the
// number chosen.
int configure_cpu_threads(int local_world_size);

}  // namespace tripod::backend
