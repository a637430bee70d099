// Check macro for NCCL calls, and one for the CUDA runtime calls the NCCL
// communicator makes, on the one generator pattern of backend/cuda/cuda_check.h.
// The error names the statement, file:line, the device, the global rank and
// group, the NCCL error string and ncclGetLastError. Only comm/nccl includes it.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

namespace tripod::comm::nccl {

// Throws tripod::Error (or TimeoutError when `timeout` is set).
[[noreturn]] void nccl_check_failed(const char* lib, int code, const std::string& text,
                                    const char* stmt, const char* file, int line,
                                    const std::string& where);

}  // namespace tripod::comm::nccl

// `where`: a std::string naming the global rank and group ("global rank 3, group tp [2, 3]").
#define TRIPOD_NCCL_CHECK(stmt, nccl_comm, where) \
  do { \
    ncclResult_t e_ = (stmt); \
    if (e_ != ncclSuccess && e_ != ncclInProgress) \
      ::tripod::comm::nccl::nccl_check_failed( \
          "NCCL", static_cast<int>(e_), \
          std::string(ncclGetErrorString(e_)) + ((nccl_comm) ? std::string("; last error: ") + \
                                                             ncclGetLastError(nccl_comm) \
                                                       : std::string()), \
          #stmt, __FILE__, __LINE__, (where)); \
  } while (0)

#define TRIPOD_NCCL_CUDA_CHECK(stmt, where)                                                     \
  do {                                                                                          \
    cudaError_t e_ = (stmt);                                                                    \
    if (e_ != cudaSuccess)                                                                      \
      ::tripod::comm::nccl::nccl_check_failed("CUDA", static_cast<int>(e_),                     \
                                              cudaGetErrorString(e_), #stmt, __FILE__,          \
                                              __LINE__, (where));                               \
  } while (0)
