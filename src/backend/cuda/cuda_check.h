// Check macros for CUDA runtime, cuBLAS(Lt) and cuDNN calls: one generator
// (in the spirit of ggml's CUDA_CHECK_GEN), so every library error names the
// statement, file:line, the current device and the library's error string,
// and throws tripod::Error. Only backend/cuda includes this header.
// .cu files must not include base/error.h (fmt); they report through fail().
//
//   TRIPOD_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, stream));
//   TRIPOD_CUBLAS_CHECK(cublasLtMatmul(...));
//   TRIPOD_CUDA_CHECK(cudaGetLastError());   // after every launch (llm.c)
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "tensor/dtype.h"

namespace tripod::backend::cuda {

// Throws tripod::Error: "<lib> error <code> (<text>) in `<stmt>` at file:line on cuda:<dev>".
[[noreturn]] void library_check_failed(const char* lib, int code, const char* text,
                                       const char* stmt, const char* file, int line);

// Throws tripod::Error with `message` (for .cu files, which keep fmt out of
// nvcc's way: fmt's consteval format strings do not compile under nvcc).
[[noreturn]] void fail(const std::string& message);
[[noreturn]] void fail_dtype(DType dtype);  // "not an activation type (f32, bf16, f16)"

inline const char* error_text(cudaError_t e) { return cudaGetErrorString(e); }
inline const char* error_text(cublasStatus_t s) { return cublasGetStatusString(s); }

}  // namespace tripod::backend::cuda

#define TRIPOD_LIBRARY_CHECK_GEN(lib, stmt, ok)                                              \
  do {                                                                                       \
    auto e_ = (stmt);                                                                        \
    if (e_ != (ok))                                                                          \
      ::tripod::backend::cuda::library_check_failed(lib, static_cast<int>(e_),               \
                                                    ::tripod::backend::cuda::error_text(e_), \
                                                    #stmt, __FILE__, __LINE__);              \
  } while (0)

#define TRIPOD_CUDA_CHECK(stmt) TRIPOD_LIBRARY_CHECK_GEN("CUDA", stmt, cudaSuccess)
#define TRIPOD_CUBLAS_CHECK(stmt) TRIPOD_LIBRARY_CHECK_GEN("cuBLAS", stmt, CUBLAS_STATUS_SUCCESS)
