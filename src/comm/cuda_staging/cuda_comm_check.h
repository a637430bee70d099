// The CUDA error check of the host-side communicators' device code
// (cuda_staging.cpp, cuda_ipc.cpp): clears the sticky error and names the
// communicator, the call and the device.
#pragma once

#include <cuda_runtime.h>

#include "base/error.h"

namespace tripod::comm {

inline void check_cuda(cudaError_t e, const char* who, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  int dev = -1;
  cudaGetDevice(&dev);
  TRIPOD_FAIL("{}: {} failed on cuda:{}: {}", who, what, dev, cudaGetErrorString(e));
}

}  // namespace tripod::comm
