// What the bf16 (matmul.cpp) and FP8 (fp8_matmul.cpp) cuBLASLt paths share:
// the operand type names, RAII holders for cuBLASLt descriptors, so an error thrown mid-setup leaks
// none, and the alignment the heuristic is told about.
#pragma once

#include <cublasLt.h>

#include <cstdint>

#include "base/error.h"
#include "tensor/dtype.h"

namespace tripod::backend::cuda::lt {

// cuBLASLt's name of a GEMM operand's element type.
inline cudaDataType_t cuda_type(DType dt) {
  switch (dt) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
    case DType::E4M3: return CUDA_R_8F_E4M3;
    case DType::E5M2: return CUDA_R_8F_E5M2;
    default: TRIPOD_FAIL("cuBLASLt matmul: unsupported dtype {}", dtype_name(dt));
  }
}

// Largest power of two (<= 256) dividing the address, for the heuristic's
// alignment preferences (views can start at any element).
inline int alignment_of(const void* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  int align = 256;
  while (align > 1 && a % align) align >>= 1;
  return align;
}

// The bucket of a GEMM dimension (NOTE [Algorithms for shapes that vary] in
// matmul.cpp): d itself up to 128, else d rounded up to a multiple of an
// eighth of its largest power of two (1000 -> 1024, 1100 -> 1152).
inline int64_t shape_bucket(int64_t d) {
  if (d <= 128) return d;
  int64_t p = 1;
  while (p * 2 <= d) p *= 2;
  const int64_t g = p / 8;
  return (d + g - 1) / g * g;
}

struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  ~MatmulDesc() { if (d) cublasLtMatmulDescDestroy(d); }
};
struct Layout {
  cublasLtMatrixLayout_t l = nullptr;
  ~Layout() { if (l) cublasLtMatrixLayoutDestroy(l); }
};
struct Preference {
  cublasLtMatmulPreference_t p = nullptr;
  ~Preference() { if (p) cublasLtMatmulPreferenceDestroy(p); }
};

}  // namespace tripod::backend::cuda::lt
