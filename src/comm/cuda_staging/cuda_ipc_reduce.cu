// The reduction kernel of the CUDA IpcDevice (comm/cuda_staging/cuda_ipc.cpp):
// out[i] = op over the inputs of in[r][i], in input order; halves
// accumulate in f32 and round once, the other types in their own type.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "comm/cuda_staging/cuda_ipc_reduce.h"

namespace tripod::comm::cuda_ipc {
namespace {


template <class T, class Acc, bool kMax>
__global__ void reduce_kernel(T* out, Inputs ins, size_t count) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    Acc acc = Acc(static_cast<const T*>(ins.p[0])[i]);
    for (int r = 1; r < ins.n; ++r) {
      const Acc v = Acc(static_cast<const T*>(ins.p[r])[i]);
      acc = kMax ? (v > acc ? v : acc) : acc + v;
    }
    out[i] = T(acc);
  }
}

template <class T, class Acc>
cudaError_t launch(void* out, const Inputs& ins, size_t count, bool max, cudaStream_t s) {
  const int threads = 256;
  const size_t want = (count + threads - 1) / threads;
  const int blocks = int(want < 4096 ? (want ? want : 1) : 4096);
  if (max) reduce_kernel<T, Acc, true><<<blocks, threads, 0, s>>>(static_cast<T*>(out), ins, count);
  else reduce_kernel<T, Acc, false><<<blocks, threads, 0, s>>>(static_cast<T*>(out), ins, count);
  return cudaGetLastError();
}

}  // namespace

cudaError_t reduce(void* out, const Inputs& in, size_t count, ReduceType type, bool max, cudaStream_t s) {
  if (count == 0) return cudaSuccess;
  switch (type) {
    case ReduceType::F32: return launch<float, float>(out, in, count, max, s);
    case ReduceType::F64: return launch<double, double>(out, in, count, max, s);
    case ReduceType::BF16: return launch<__nv_bfloat16, float>(out, in, count, max, s);
    case ReduceType::F16: return launch<__half, float>(out, in, count, max, s);
    case ReduceType::I32: return launch<int32_t, int32_t>(out, in, count, max, s);
    case ReduceType::I64: return launch<int64_t, int64_t>(out, in, count, max, s);
    case ReduceType::U8: return launch<uint8_t, uint8_t>(out, in, count, max, s);
  }
  return cudaErrorInvalidValue;
}

}  // namespace tripod::comm::cuda_ipc
