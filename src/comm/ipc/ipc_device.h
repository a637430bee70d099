// IpcDevice: what the IPC communicator (comm/ipc/ipc_communicator.h) needs
// from the memory its ranks share: buffers one rank allocates and the others
// map, events that order one rank's device work after another's, and copies
// and reductions queued on this rank's compute stream.
//
// Two implementations:
//  - CPU (cpu_ipc_device.cpp, in this library): POSIX shared memory; every
//    copy and reduction runs at once on the calling thread, so the events
//    are no-ops (the host handshake alone orders the ranks).
//  - CUDA (comm/cuda_staging/cuda_ipc.cu, registered when linked): ranks that
//    share one GPU map each other's device memory and events through CUDA
//    IPC handles; copies and the reduction kernel run on the backend's
//    compute stream, and interprocess events order them, so the host never
//    waits for the GPU.
//
// Handles are opaque byte strings (they travel through the group's store).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "tensor/dtype.h"

namespace tripod::comm {

struct CommConfig;

class IpcDevice {
 public:
  virtual ~IpcDevice() = default;
  // Equal on ranks whose buffers can map each other's (CPU: the host and its
  // boot; CUDA: the GPU's UUID). The communicator is used only when every
  // member of the group reports the same location.
  virtual std::string location() = 0;
  // Whether `t` lives where this device's copies and reductions run.
  virtual bool serves(const Tensor& t) const = 0;
  // The largest mailbox this member would allocate now (what the memory
  // holding mailboxes can spare); the group uses member 0's figure, and ops
  // larger than it go to the fallback communicator.
  virtual size_t mailbox_limit() = 0;

  // Memory the peers can map: alloc returns it and its handle.
  virtual void* alloc(size_t bytes, std::string* handle) = 0;
  virtual void free(void* p) noexcept = 0;
  virtual void* open(const std::string& handle) = 0;  // a peer's buffer
  virtual void close(void* p) noexcept = 0;
  // Every peer has opened `handle`: the name may go (CPU shared memory).
  virtual void forget_name(const std::string& handle) noexcept { (void)handle; }

  // Events: record() marks the work queued so far on the compute stream;
  // wait() makes the compute stream wait for the last record() of an event,
  // also one another rank recorded.
  virtual void* event_create(std::string* handle) = 0;
  virtual void* event_open(const std::string& handle) = 0;
  virtual void event_destroy(void* e, bool opened) noexcept = 0;
  virtual void record(void* e) = 0;
  virtual void wait(void* e) = 0;

  // Queued on the compute stream, after the work queued there so far.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // out[i] = op over ins[0..n) of ins[r][i], reduced in the order of ins
  // (every rank passes the same order: the results are bit-identical).
  virtual void reduce(void* out, const std::vector<const void*>& ins, size_t count, DType dtype, ReduceOp op) = 0;
  // The host waits for the compute stream.
  virtual void synchronize() = 0;
};

using IpcDeviceFactory = std::function<std::shared_ptr<IpcDevice>(const CommConfig&)>;
bool register_ipc_device(DeviceType device, IpcDeviceFactory factory);
// CPU always; CUDA once comm/cuda_staging/ is linked; null otherwise.
std::shared_ptr<IpcDevice> make_ipc_device(DeviceType device, const CommConfig& config);

}  // namespace tripod::comm
