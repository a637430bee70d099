// LocalCommunicator: the communicator of a group of one rank. Every
// collective is the identity (all_reduce, broadcast, barrier) or a copy
// (all_gather, reduce_scatter); Work is complete on return. Works on any
// device that the tensor's allocator can copy within (host memcpy here; the
// NCCL library uses its own for device tensors).
//
// Relates to: comm/communicator.h (contract), comm/context.h (made for size-1 groups).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "comm/communicator.h"

namespace tripod::comm {

// Copies nbytes from src to dst on `device`, in order after the work queued
// on `stream` (the compute stream, a cudaStream_t; null: after all of the
// device's work). Host tensors are copied with memcpy.
using DeviceCopy = std::function<void(void* dst, const void* src, size_t nbytes, Device device, void* stream)>;

class LocalCommunicator : public Communicator {
 public:
  // `stream`: where the compute stream is published (CommConfig::device_stream;
  // read at each copy, so a stream set after the group was made counts).
  explicit LocalCommunicator(std::string name, int global_rank = 0, DeviceCopy copy = {},
                             std::shared_ptr<std::atomic<void*>> stream = nullptr);
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }
  std::shared_ptr<Work> all_reduce(Tensor& t, const AllReduceOptions& o = {}) override;
  std::shared_ptr<Work> all_gather(Tensor& out, const Tensor& in, const AllGatherOptions& o = {}) override;
  std::shared_ptr<Work> reduce_scatter(Tensor& out, const Tensor& in,
                                       const ReduceScatterOptions& o = {}) override;
  std::shared_ptr<Work> broadcast(Tensor& t, const BroadcastOptions& o = {}) override;
  std::shared_ptr<Work> send(const Tensor& t, int dst, const SendOptions& o = {}) override;
  std::shared_ptr<Work> recv(Tensor& t, int src, const RecvOptions& o = {}) override;
  void barrier(const BarrierOptions& o = {}) override {}
  void abort() noexcept override { aborted_ = true; }

 private:
  void copy(const Tensor& dst, const Tensor& src, const char* op);
  std::string name_;
  int global_rank_;
  DeviceCopy copy_;
  std::shared_ptr<std::atomic<void*>> stream_;
  bool aborted_ = false;
};

// A Work that is already done (optionally with an error to rethrow).
class CompletedWork : public Work {
 public:
  void wait() override {}
  bool is_completed() override { return true; }
};

}  // namespace tripod::comm
