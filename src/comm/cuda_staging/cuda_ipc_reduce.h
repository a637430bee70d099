// The reduction kernel of the CUDA IpcDevice (cuda_ipc.cpp), kept in its own
// .cu file so that only the kernel goes through nvcc.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace tripod::comm::cuda_ipc {

constexpr int kMaxInputs = 64;
struct Inputs {
  const void* p[kMaxInputs];
  int n;
};
enum class ReduceType { F32, F64, BF16, F16, I32, I64, U8 };

// out[i] = sum (or max) over in.p[0..n) of in.p[r][i], queued on s.
cudaError_t reduce(void* out, const Inputs& in, size_t count, ReduceType type, bool max, cudaStream_t s);

}  // namespace tripod::comm::cuda_ipc
