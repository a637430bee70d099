// The CUDA StagingDevice of comm/staged/: pinned host blocks, copies queued
// on the backend's compute stream (DistContext::set_device_stream), and
// fences that are CUDA events on that stream. Registered for
// DeviceType::CUDA when linked. See NOTE [Host-staged collectives].
//
// Without a compute stream (none was set) copies are synchronous and the
// device is synchronised before a device->host copy: correct, slower.
// Events are created with cudaEventBlockingSync, so a host waiting for a
// copy sleeps instead of spinning: ranks that share a GPU share its host's
// cores too.
#include <cuda_runtime.h>

#include <atomic>

#include "base/error.h"
#include "comm/context.h"
#include "comm/cuda_staging/cuda_comm_check.h"
#include "comm/staged/staged_communicator.h"

namespace tripod::comm::cuda_staging {
namespace {

void check(cudaError_t e, const char* what) { check_cuda(e, "staged collective", what); }

class EventFence : public Fence {
 public:
  explicit EventFence(cudaEvent_t e) : e_(e) {}
  ~EventFence() override {
    if (e_) cudaEventDestroy(e_);
  }
  void wait() override { check(cudaEventSynchronize(e_), "cudaEventSynchronize"); }
  bool ready() override {
    const cudaError_t q = cudaEventQuery(e_);
    if (q == cudaErrorNotReady) return false;
    check(q, "cudaEventQuery");
    return true;
  }

 private:
  cudaEvent_t e_;
};

class DoneFence : public Fence {
 public:
  void wait() override {}
  bool ready() override { return true; }
};

class CudaStaging : public StagingDevice {
 public:
  explicit CudaStaging(std::shared_ptr<std::atomic<void*>> stream) : stream_(std::move(stream)) {}

  void* alloc_pinned(size_t bytes) override {
    void* p = nullptr;
    check(cudaHostAlloc(&p, bytes, cudaHostAllocPortable), "cudaHostAlloc (pinned staging buffer)");
    return p;
  }
  void free_pinned(void* p) noexcept override { cudaFreeHost(p); }

  void copy_to_host(void* dst, const void* src, size_t bytes, Device device) override {
    select(device);
    if (cudaStream_t s = stream()) {
      check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync device->host");
    } else {
      check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy device->host");
    }
  }
  void copy_to_device(void* dst, const void* src, size_t bytes, Device device) override {
    select(device);
    if (cudaStream_t s = stream())
      check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync host->device");
    else
      check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy host->device");
  }
  std::shared_ptr<Fence> fence(Device device) override {
    cudaStream_t s = stream();
    if (!s) return std::make_shared<DoneFence>();  // the copies were synchronous
    select(device);
    cudaEvent_t e = nullptr;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync), "cudaEventCreate");
    auto f = std::make_shared<EventFence>(e);
    check(cudaEventRecord(e, s), "cudaEventRecord");
    return f;
  }

 private:
  cudaStream_t stream() const { return static_cast<cudaStream_t>(stream_->load()); }
  static void select(Device device) {
    int cur = -1;
    check(cudaGetDevice(&cur), "cudaGetDevice");
    if (cur != device.index) check(cudaSetDevice(device.index), "cudaSetDevice");
  }
  std::shared_ptr<std::atomic<void*>> stream_;
};

// Linked as an object library, so this runs in every binary that links it.
const bool registered = register_staging_device(DeviceType::CUDA, [](const CommConfig& c) {
  return std::make_shared<CudaStaging>(c.device_stream);
});

}  // namespace
}  // namespace tripod::comm::cuda_staging
