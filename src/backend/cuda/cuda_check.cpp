// Error reporting for backend/cuda (see cuda_check.h): turns library status
// codes and kernel-side failures into tripod::Error with the device named.
#include "backend/cuda/cuda_check.h"

#include "base/error.h"

namespace tripod::backend::cuda {

void library_check_failed(const char* lib, int code, const char* text, const char* stmt,
                          const char* file, int line) {
  int device = -1;
  cudaGetDevice(&device);
  ::tripod::detail::check_failed(nullptr, file, line,
                                 fmt::format("{} error {} ({}) in `{}` on cuda:{}", lib, code,
                                             text ? text : "?", stmt, device));
}

void fail(const std::string& message) { TRIPOD_FAIL("{}", message); }

void fail_dtype(DType dtype) {
  TRIPOD_FAIL("cuda backend: dtype {} is not an activation type (f32, bf16, f16)",
              dtype_name(dtype));
}

}  // namespace tripod::backend::cuda
