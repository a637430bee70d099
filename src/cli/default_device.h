// The device `tripod train` uses when --device is not given: as a Megatron
// job script expects, the GPU when this build has CUDA and a GPU is visible,
// the CPU otherwise.
#pragma once

#include <string>

namespace tripod::cli {

struct DeviceChoice {
  std::string device;  // "cuda" or "cpu"
  std::string reason;  // for the start-up log line
  // A GPU is visible but this build has no CUDA: worth one warning.
  bool gpu_without_cuda_build = false;
};

DeviceChoice default_device();

// True when the NVIDIA driver exposes a GPU to this process (device files
// or the driver's GPU list, and CUDA_VISIBLE_DEVICES does not hide them all).
bool nvidia_gpu_visible();

}  // namespace tripod::cli
