// Communicator: collectives and point-to-point over one process group.
//
// Contract (as c10d's Backend):
//  - Every rank of the group calls the same collectives in the same order
//    with the same sizes. Ranks in arguments are ranks *within this group*.
//  - Calls are asynchronous: they return a Work handle; the tensor must stay
//    alive and untouched until wait() returns. wait() throws TimeoutError
//    (naming the global rank, the group, the op and the elapsed time) once
//    the options' timeout has passed, and Error when the group was aborted
//    or a peer failed.
//  - One tensor per call, contiguous, on the device the implementation
//    serves (Gloo: host; NCCL: this process's GPU).
//  - timeout == 0 means the communicator's default (--distributed-timeout-minutes).
//  - send/recv: both may be in flight at once (post both, then wait). Gloo
//    matches them by tag; NCCL by order between the two peers (tags
//    ignored), so pair them as Megatron does (even ranks send first).
//    For p2p, is_completed() may stay false until wait() has been called.
//  - Implementations: comm/gloo/ (host tensors), comm/nccl/ (GPU tensors),
//    comm/staged/ (GPU tensors staged through host memory to Gloo),
//    LocalCommunicator (groups of one rank). See docs/distributed.md.
//
// Usage:
//   AllReduceOptions o; o.op = ReduceOp::Sum;
//   comm.all_reduce(grad, o)->wait();
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace tripod::comm {

using Millis = std::chrono::milliseconds;

enum class ReduceOp { Sum, Max };

struct AllReduceOptions { ReduceOp op = ReduceOp::Sum; Millis timeout{0}; };
struct AllGatherOptions { Millis timeout{0}; };
struct ReduceScatterOptions { ReduceOp op = ReduceOp::Sum; Millis timeout{0}; };
struct BroadcastOptions { int root = 0; Millis timeout{0}; };
struct SendOptions { int tag = 0; Millis timeout{0}; };
struct RecvOptions { int tag = 0; Millis timeout{0}; };
struct BarrierOptions { Millis timeout{0}; };
struct AllToAllOptions { int tag = 0; Millis timeout{0}; };

class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;             // required: block until done; throws on timeout/failure
  virtual bool is_completed() = 0;     // required: non-blocking poll
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;                 // rank within this group
  virtual int size() const = 0;
  virtual const std::string& name() const = 0;  // group name, e.g. "tp", "dp", "world"

  // In place: t = op over ranks of t.
  virtual std::shared_ptr<Work> all_reduce(Tensor& t, const AllReduceOptions& o = {}) = 0;
  // out(size * n) = concat over ranks of in(n), in rank order.
  virtual std::shared_ptr<Work> all_gather(Tensor& out, const Tensor& in,
                                           const AllGatherOptions& o = {}) = 0;
  // out(n) = this rank's chunk of op over ranks of in(size * n).
  virtual std::shared_ptr<Work> reduce_scatter(Tensor& out, const Tensor& in,
                                               const ReduceScatterOptions& o = {}) = 0;
  virtual std::shared_ptr<Work> broadcast(Tensor& t, const BroadcastOptions& o = {}) = 0;
  virtual std::shared_ptr<Work> send(const Tensor& t, int dst, const SendOptions& o = {}) = 0;
  virtual std::shared_ptr<Work> recv(Tensor& t, int src, const RecvOptions& o = {}) = 0;
  virtual void barrier(const BarrierOptions& o = {}) = 0;
  // All-to-all with per-peer counts (MPI's alltoallv; Megatron's MoE token
  // dispatch): in holds size chunks in rank order, send_counts[r] elements
  // for rank r; out receives recv_counts[r] elements from rank r, in rank
  // order. The chunks between distinct ranks move; the chunk a rank keeps
  // (in's chunk at its own rank) is NOT copied: the caller fills out's
  // chunk at its own rank (the token dispatcher copies it on its stream).
  // Zero counts send nothing, so a peer with no tokens costs no message.
  // Optional: the default (communicator.cpp) is a pairwise exchange over
  // send/recv (step s: send to rank + s, receive from rank - s, both in
  // flight), which every implementation's send/recv serves.
  virtual std::shared_ptr<Work> all_to_all_v(Tensor& out, const Tensor& in, const std::vector<int64_t>& send_counts,
                                             const std::vector<int64_t>& recv_counts,
                                             const AllToAllOptions& o = {});
  // Ends all outstanding and future work with an error (used when a peer died).
  virtual void abort() noexcept = 0;

 protected:
  // all_to_all_v's counts checked against the group and the tensors; each
  // peer's chunk starts at (*send_at)[r] of `in` and (*recv_at)[r] of `out`
  // (elements; n + 1 offsets each).
  void all_to_all_offsets(const Tensor& out, const Tensor& in, const std::vector<int64_t>& send_counts,
                          const std::vector<int64_t>& recv_counts, std::vector<int64_t>* send_at,
                          std::vector<int64_t>* recv_at) const;
};

}  // namespace tripod::comm
