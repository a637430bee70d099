// Implementation of cli/device.h.
#include "cli/device.h"

#include <algorithm>

#include "backend/cpu/cpu_backend.h"
#include "base/error.h"
#include "base/log.h"

#if defined(TRIPOD_WITH_CUDA)
#include "backend/cuda/allocator.cuh"
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

GpuAssignment assign_gpu(int local_rank, int local_world_size, int device_count, comm::CommBackend backend) {
  TRIPOD_CHECK_HINT(device_count > 0, "run with --device cpu, or on a machine with a GPU",
                    "--device cuda: no CUDA device is visible");
  const int ranks = std::max(local_world_size, local_rank + 1);
  if (ranks <= device_count) return {local_rank, 1};
  TRIPOD_CHECK_HINT(
      backend == comm::CommBackend::Gloo,
      fmt::format("start at most {} rank(s) per node (--nproc-per-node), or rehearse the layout on the GPUs "
                  "you have with ranks sharing a GPU: --distributed-backend gloo (device buffers staged "
                  "through host memory; right for correctness and memory per rank, not for speed; see "
                  "docs/parallelism.md)", device_count),
      "{} ranks on this node but {} CUDA device(s) visible: NCCL needs a GPU per rank (rank with local "
      "rank {} has none)", ranks, device_count, local_rank);
  GpuAssignment a;
  a.device = local_rank % device_count;
  a.sharing = ranks / device_count + (a.device < ranks % device_count ? 1 : 0);
  return a;
}

comm::CommBackend comm_backend_for(const std::string& device, const std::string& flag, bool cpu_nccl_as_gloo) {
  if (flag.empty()) return comm::CommBackend::Default;
  const comm::CommBackend b = comm::parse_comm_backend(flag);
  if (b == comm::CommBackend::Nccl && device == "cpu" && cpu_nccl_as_gloo) return comm::CommBackend::Gloo;
  TRIPOD_CHECK_HINT(!(b == comm::CommBackend::Nccl && device == "cpu"),
                    "use --distributed-backend gloo (the default) with --device cpu",
                    "--distributed-backend nccl needs --device cuda");
  return b;
}

std::unique_ptr<backend::Backend> make_backend(const std::string& device, const comm::RankInfo& info,
                                               comm::CommBackend backend) {
  if (device != "cuda") return make_backend(device, info.local_rank);
#if defined(TRIPOD_WITH_CUDA)
  const int n = backend::cuda_device_count();
  const GpuAssignment a = assign_gpu(info.local_rank, info.local_world_size, n, backend);
  auto be = backend::make_cuda_backend(a.device);
  if (a.sharing > 1) {
    const size_t cap = backend::cuda::share_device(a.device, a.sharing);
    if (info.local_rank == 0)
      log::warn("{} ranks on this node share {} CUDA device(s) (--distributed-backend gloo, rank r on GPU "
                "local_rank % {}); each rank's allocator is capped at {:.1f} GiB. This rehearses the layout: "
                "losses, gradients and memory per rank are meaningful, speed figures (tokens/s, MFU, "
                "bandwidth) are not",
                std::max(info.local_world_size, info.local_rank + 1), n, n, double(cap) / double(1 << 30));
  }
  return be;
#else
  return make_backend(device, info.local_rank);  // fails naming the missing CUDA build
#endif
}

}  // namespace tripod::cli
