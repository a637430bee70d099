// Implementation of cli/default_device.h.
#include "cli/default_device.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#if defined(TRIPOD_WITH_CUDA)
#include "backend/cuda/cuda_backend.h"
#endif

namespace tripod::cli {

bool nvidia_gpu_visible() {
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) {
    const std::string s = v;
    if (s.empty() || s == "-1" || s == "none" || s == "NoDevFiles") return false;
  }
  if (::access("/dev/nvidia0", F_OK) == 0) return true;
  std::error_code ec;
  const std::filesystem::path gpus = "/proc/driver/nvidia/gpus";
  return std::filesystem::is_directory(gpus, ec) &&
         std::filesystem::directory_iterator(gpus, ec) != std::filesystem::directory_iterator();
}

DeviceChoice default_device() {
  DeviceChoice c;
#if defined(TRIPOD_WITH_CUDA)
  const int n = backend::cuda_device_count();
  if (n > 0) {
    c.device = "cuda";
    c.reason = n == 1 ? "1 GPU visible" : std::to_string(n) + " GPUs visible";
    return c;
  }
  c.device = "cpu";
  c.reason = "no GPU visible";
#else
  c.device = "cpu";
  c.gpu_without_cuda_build = nvidia_gpu_visible();
  c.reason = c.gpu_without_cuda_build ? "this build has no CUDA" : "no GPU visible";
#endif
  return c;
}

}  // namespace tripod::cli
