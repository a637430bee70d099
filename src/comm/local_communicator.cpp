// Implementation of comm/local_communicator.h.
#include "comm/local_communicator.h"

#include <cstring>

#include "base/error.h"

namespace tripod::comm {

LocalCommunicator::LocalCommunicator(std::string name, int global_rank, DeviceCopy copy,
                                     std::shared_ptr<std::atomic<void*>> stream)
    : name_(std::move(name)), global_rank_(global_rank), copy_(std::move(copy)), stream_(std::move(stream)) {}

void LocalCommunicator::copy(const Tensor& dst, const Tensor& src, const char* op) {
  TRIPOD_CHECK(dst.nbytes() == src.nbytes() && dst.dtype() == src.dtype(),
               "{} on group {} (size 1, global rank {}): output {} does not match input {}", op,
               name_, global_rank_, dst.str(), src.str());
  if (dst.raw() == src.raw()) return;
  if (src.is_cpu() && dst.is_cpu()) std::memcpy(dst.raw(), src.raw(), src.nbytes());
  else {
    TRIPOD_CHECK(bool(copy_), "{} on group {}: no copy function for device tensors", op, name_);
    copy_(dst.raw(), src.raw(), src.nbytes(), dst.device(), stream_ ? stream_->load() : nullptr);
  }
}

static std::shared_ptr<Work> done() { return std::make_shared<CompletedWork>(); }

std::shared_ptr<Work> LocalCommunicator::all_reduce(Tensor& t, const AllReduceOptions&) {
  TRIPOD_CHECK(!aborted_, "all_reduce on aborted group {}", name_);
  return done();
}
std::shared_ptr<Work> LocalCommunicator::all_gather(Tensor& out, const Tensor& in,
                                                    const AllGatherOptions&) {
  copy(out, in, "all_gather");
  return done();
}
std::shared_ptr<Work> LocalCommunicator::reduce_scatter(Tensor& out, const Tensor& in,
                                                        const ReduceScatterOptions&) {
  copy(out, in, "reduce_scatter");
  return done();
}
std::shared_ptr<Work> LocalCommunicator::broadcast(Tensor& t, const BroadcastOptions& o) {
  TRIPOD_CHECK(o.root == 0, "broadcast on group {} of size 1: root {} is not rank 0", name_, o.root);
  return done();
}
std::shared_ptr<Work> LocalCommunicator::send(const Tensor&, int dst, const SendOptions&) {
  TRIPOD_FAIL("send to rank {} on group {} of size 1 (global rank {}): there is no peer", dst,
              name_, global_rank_);
}
std::shared_ptr<Work> LocalCommunicator::recv(Tensor&, int src, const RecvOptions&) {
  TRIPOD_FAIL("recv from rank {} on group {} of size 1 (global rank {}): there is no peer", src,
              name_, global_rank_);
}

}  // namespace tripod::comm
