// What the bf16 (matmul.cpp) and FP8 (fp8_matmul.cpp) cuBLASLt paths share:
// RAII holders for cuBLASLt descriptors, so an error thrown mid-setup leaks
// none, and the alignment the heuristic is told about.
#pragma once

#include <cublasLt.h>

#include <cstdint>

namespace tripod::backend::cuda::lt {

// Largest power of two (<= 256) dividing the address, for the heuristic's
// alignment preferences (views can start at any element).
inline int alignment_of(const void* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  int align = 256;
  while (align > 1 && a % align) align >>= 1;
  return align;
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
