// DistContext: one per process. Owns the bootstrap store and the
// communicators of this process's groups.
//
// Relates to: comm/rendezvous.h (RankInfo), comm/tcp_store.h,
// comm/gloo/gloo_communicator.h (CPU), comm/nccl/ (GPU),
// parallel/groups.h (builds ProcessGroups through new_group).
//
// Contract:
//  - init() is collective over the world: every rank calls it. Rank 0 hosts
//    the TCP store at MASTER_ADDR:MASTER_PORT; all ranks join and wait for
//    each other (the error names the ranks that never joined).
//  - new_group() is collective over the world: every rank calls it with the
//    same `groups`, in the same order. No global state: pass the returned
//    communicators (ProcessGroups) to whoever needs them.
//  - Size-1 groups (and a world of 1) are LocalCommunicators: no store, no
//    sockets, every op is the identity or a copy.
//
// Usage:
//   auto ctx = DistContext::init(resolve_rank_info(), DeviceType::CPU, std::chrono::minutes(10));
//   auto tp = ctx->new_group({{0, 1}, {2, 3}}, "tp");
//   tp->all_reduce(t)->wait();
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/flight_recorder.h"
#include "comm/local_communicator.h"
#include "comm/rendezvous.h"
#include "comm/store.h"
#include "tensor/dtype.h"

namespace tripod::comm {

class TcpStoreServer;

// Which library moves a GPU job's tensors (Megatron's --distributed-backend).
// Default: NCCL for GPU tensors, Gloo for host tensors. Gloo for a GPU job
// stages every buffer through pinned host memory (comm/staged/), which is
// slow but lets several ranks share one GPU (rehearsing a layout).
enum class CommBackend { Default, Nccl, Gloo };
// "nccl" | "gloo" (as Megatron's flag); throws on anything else.
CommBackend parse_comm_backend(const std::string& name);
// The backend a job on `device` ends up with ("Gloo", "NCCL", "Gloo (host-staged)").
std::string comm_backend_name(DeviceType device, CommBackend backend);

// What a communicator needs to know about its group.
struct GroupSpec {
  std::string name;               // "tp", "dp", "world", ...
  std::vector<int> global_ranks;  // members, in group-rank order
  int group_rank = 0;             // this process's index in global_ranks
  int global_rank = 0;
  std::string describe() const;   // "tp [2, 3]"
};

struct CommConfig {
  Millis timeout{600000};
  std::shared_ptr<FlightRecorder> recorder;
  int local_rank = 0;             // GPU index for NCCL
  CommBackend backend = CommBackend::Default;  // GPU jobs: NCCL, or Gloo staged through the host
  std::string local_addr;         // address peers reach this process at (Gloo)
  // The CUDA stream compute runs on (NCCL orders its work after it); null =
  // synchronise the device before each collective. See set_device_stream().
  std::shared_ptr<std::atomic<void*>> device_stream = std::make_shared<std::atomic<void*>>(nullptr);
};

// Factory for a device's communicator: called by every member of the group
// with a store namespace private to that group.
using CommFactory = std::function<std::shared_ptr<Communicator>(
    const GroupSpec&, std::shared_ptr<Store>, const CommConfig&)>;
// The NCCL library registers itself for DeviceType::CUDA (comm/nccl/).
bool register_comm_factory(DeviceType device, CommFactory factory);
bool has_comm_factory(DeviceType device);
// The registered communicator for `device` over `spec`'s members (all of them
// call it); tests use it to build a device communicator of any size directly.
std::shared_ptr<Communicator> make_device_communicator(DeviceType device, const GroupSpec& spec,
                                                       std::shared_ptr<Store> store,
                                                       const CommConfig& config);
// Copies within a device, for size-1 groups of device tensors (registered by comm/nccl/).
bool register_device_copy(DeviceType device, DeviceCopy copy);

class DistContext {
 public:
  // From a launcher's environment: starts / joins the TCP store (or a
  // FileStore when TRIPOD_INIT_METHOD=file:///path) and the world group.
  // `backend` Gloo with comm_device CUDA: device tensors staged through host
  // memory to Gloo (comm/staged/), so ranks may share a GPU.
  static std::unique_ptr<DistContext> init(const RankInfo& info, DeviceType comm_device,
                                           std::chrono::milliseconds timeout,
                                           CommBackend backend = CommBackend::Default);
  // Over a store the caller made (threads as ranks over one HashStore in
  // tests, or a FileStore). local_rank picks the GPU (default: rank).
  static std::unique_ptr<DistContext> init_with_store(int rank, int world_size,
                                                      std::shared_ptr<Store> store,
                                                      DeviceType comm_device,
                                                      std::chrono::milliseconds timeout,
                                                      int local_rank = -1,
                                                      CommBackend backend = CommBackend::Default);
  ~DistContext();
  DistContext(const DistContext&) = delete;
  DistContext& operator=(const DistContext&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  DeviceType device() const { return device_; }
  CommBackend backend() const { return config_.backend; }
  std::chrono::milliseconds timeout() const { return config_.timeout; }
  std::shared_ptr<Communicator> world() { return world_; }
  std::shared_ptr<Store> store() { return store_; }  // null for a world of 1
  std::shared_ptr<FlightRecorder> recorder() { return config_.recorder; }

  // Collective over the world. `groups` are disjoint lists of global ranks
  // (usually a partition of the world). Returns the communicator of the
  // group that contains this rank, or nullptr when no group does (e.g.
  // middle pipeline stages for the embedding group).
  std::shared_ptr<Communicator> new_group(const std::vector<std::vector<int>>& groups,
                                          const std::string& name);

  // Ends every communicator's outstanding work with an error (a peer died).
  void abort() noexcept;

  // The CUDA stream (a cudaStream_t) the backend computes on. Device
  // communicators (NCCL) start each collective after the work queued there,
  // and wait() makes it wait for the result. Without it they synchronise the
  // device first (correct, slower). No effect on CPU communicators.
  void set_device_stream(void* stream) { config_.device_stream->store(stream); }

 private:
  DistContext() = default;
  void start(int rank, int world_size, std::shared_ptr<Store> store, DeviceType comm_device,
             std::chrono::milliseconds timeout);
  void join_world();
  bool claim_rank(const std::string& me);  // NOTE [Rank claims] in context.cpp
  std::shared_ptr<Communicator> make_comm(const GroupSpec& spec, const std::string& store_prefix);

  int rank_ = 0, world_size_ = 1;
  DeviceType device_ = DeviceType::CPU;
  CommConfig config_;
  std::unique_ptr<TcpStoreServer> server_;
  std::shared_ptr<Store> store_;
  std::shared_ptr<Communicator> world_;
  std::vector<std::weak_ptr<Communicator>> comms_;
  bool aborted_ = false;
  int groups_made_ = 0;  // sequence number of new_group calls (same on every rank)
  std::string endpoint_; // "127.0.0.1:29500" for messages
};

}  // namespace tripod::comm
