// Implementation of cli/device.h.
#include "cli/device.h"

#include "backend/cpu/cpu_backend.h"
#include "base/error.h"

#if defined(TRIPOD_WITH_CUDA)
#include "backend/cuda/cuda_backend.h"
#endif

namespace tripod::cli {

std::unique_ptr<backend::Backend> make_backend(const std::string& device, int local_rank) {
  if (device == "cpu") return backend::make_cpu_backend();
  if (device == "cuda") {
#if defined(TRIPOD_WITH_CUDA)
    return backend::make_cuda_backend(local_rank);
#else
    TRIPOD_FAIL("--device cuda: this tripod was built without CUDA (reconfigure with -DTRIPOD_CUDA=ON "
                "on a machine with the CUDA toolkit)");
#endif
  }
  TRIPOD_CHECK_HINT(false, "use --device cpu or --device cuda", "unknown --device '{}'", device);
  return nullptr;
}

}  // namespace tripod::cli
