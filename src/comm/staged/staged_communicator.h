// StagedCommunicator: collectives and p2p on device tensors through a host
// communicator (Gloo), staging each buffer through pinned host memory. It is
// what `--distributed-backend gloo` gives a GPU job, and what lets several
// ranks share one GPU to rehearse a cluster layout (docs/parallelism.md,
// "Rehearsing a layout on one GPU").
//
// Relates to: comm/communicator.h (contract, unchanged), comm/gloo/ (the
// host communicator it delegates to), comm/context.h (made for a GPU job
// when CommConfig::backend is Gloo), comm/cuda_staging/ (the CUDA
// StagingDevice, registered for DeviceType::CUDA).
//
// NOTE [Host-staged collectives]
// Ordering follows the backend's compute stream, with no device-wide
// synchronisation:
//  1. issue: queue device->host copies of the inputs on the compute stream
//     (after the kernels that produced them), wait on a fence recorded after
//     those copies (a stream event, not the whole device), then hand the
//     pinned host buffers to the host communicator (asynchronous: Gloo's
//     worker thread).
//  2. wait(): wait for the host communicator, then queue host->device copies
//     of the outputs on the compute stream, so kernels queued after wait()
//     (the consumers) see the result. The pinned buffers go back to a pool
//     with a fence recorded after those copies; a buffer is reused only once
//     its fence has passed.
// is_completed() finishes the Work (step 2) once the host op is done, so a
// caller that polls is ordered exactly like one that waits.
// Host tensors pass straight through to the host communicator. No chunking:
// each op stages its whole buffer (Gloo takes any size), so pinned memory
// grows to the largest set of ops in flight at once and is then reused.
//
// Usage (DistContext does this for CommConfig::backend == CommBackend::Gloo):
//   auto staged = make_staged_communicator(make_gloo_communicator(spec, store, cfg),
//                                          make_staging_device(DeviceType::CUDA, cfg));
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "comm/communicator.h"

namespace tripod::comm {

struct CommConfig;

// Completion of the device work queued before it was recorded.
class Fence {
 public:
  virtual ~Fence() = default;
  virtual void wait() = 0;    // blocks the calling thread until the work is done
  virtual bool ready() = 0;   // non-blocking poll
};

// What staging needs from a device: pinned host memory, copies queued on
// the compute stream, and fences on that stream.
class StagingDevice {
 public:
  virtual ~StagingDevice() = default;
  virtual void* alloc_pinned(size_t bytes) = 0;
  virtual void free_pinned(void* p) noexcept = 0;
  // Queued on the compute stream of `device`, after the work queued there.
  virtual void copy_to_host(void* dst, const void* src, size_t bytes, Device device) = 0;
  virtual void copy_to_device(void* dst, const void* src, size_t bytes, Device device) = 0;
  // A fence after everything queued so far on the compute stream of `device`.
  virtual std::shared_ptr<Fence> fence(Device device) = 0;
};

using StagingDeviceFactory = std::function<std::shared_ptr<StagingDevice>(const CommConfig&)>;
// comm/cuda_staging/ registers itself for DeviceType::CUDA when linked.
bool register_staging_device(DeviceType device, StagingDeviceFactory factory);
bool has_staging_device(DeviceType device);
std::shared_ptr<StagingDevice> make_staging_device(DeviceType device, const CommConfig& config);

// Pool statistics of one staged communicator (tests, docs).
struct StagingStats {
  size_t pinned_bytes = 0;     // pinned host memory held (in use + free)
  int64_t pinned_allocs = 0;   // blocks ever allocated
  int64_t reuses = 0;          // acquisitions served from the pool
  int64_t staged_ops = 0;      // ops that touched device tensors
};

// Wraps `host` (a communicator of host tensors); `device` does the copies.
std::shared_ptr<Communicator> make_staged_communicator(std::shared_ptr<Communicator> host,
                                                       std::shared_ptr<StagingDevice> device);
// The statistics of a communicator made by make_staged_communicator (zeros otherwise).
StagingStats staging_stats(const Communicator& comm);

}  // namespace tripod::comm
