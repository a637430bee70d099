// comm::LocalCommunicator, the group of one rank: all_gather and
// reduce_scatter are copies, and a copy of device tensors goes through the
// registered DeviceCopy with the compute stream published at the time of
// the copy (CommConfig::device_stream), so it is ordered after the kernels
// that wrote its input. Device tensors are host memory tagged as CUDA here
// (never dereferenced as device memory: the copy function is a fake).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "comm/local_communicator.h"
#include "tensor/tensor.h"

namespace tripod {
namespace {

struct Recorded {
  int calls = 0;
  void* stream = nullptr;
  size_t nbytes = 0;
};

comm::DeviceCopy recording_copy(Recorded& r) {
  return [&r](void* dst, const void* src, size_t n, Device, void* stream) {
    ++r.calls;
    r.stream = stream;
    r.nbytes = n;
    std::memcpy(dst, src, n);
  };
}

TEST(LocalCommunicator, DeviceCopiesFollowThePublishedStream) {
  Recorded rec;
  auto stream = std::make_shared<std::atomic<void*>>(nullptr);
  comm::LocalCommunicator g("dp", 3, recording_copy(rec), stream);
  std::vector<float> a = {1, 2, 3, 4}, b(4, 0.f);
  Tensor in = Tensor::wrap(a.data(), {4}, DType::F32, Device::cuda(0));
  Tensor out = Tensor::wrap(b.data(), {4}, DType::F32, Device::cuda(0));

  g.reduce_scatter(out, in)->wait();  // before any stream is published: null (device-wide order)
  EXPECT_EQ(rec.calls, 1);
  EXPECT_EQ(rec.stream, nullptr);
  EXPECT_EQ(rec.nbytes, 16u);
  EXPECT_EQ(b, a);

  int compute_stream = 0;  // any address stands for a cudaStream_t
  stream->store(&compute_stream);  // published after the group was made, as DistContext does
  b.assign(4, 0.f);
  g.all_gather(out, in)->wait();
  EXPECT_EQ(rec.calls, 2);
  EXPECT_EQ(rec.stream, &compute_stream);
  EXPECT_EQ(b, a);

  g.all_gather(in, in)->wait();  // in place: nothing to copy
  EXPECT_EQ(rec.calls, 2);
}

TEST(LocalCommunicator, HostTensorsAreCopiedWithoutTheDeviceCopy) {
  Recorded rec;
  comm::LocalCommunicator g("tp", 0, recording_copy(rec));
  std::vector<float> a = {5, 6}, b(2, 0.f);
  Tensor in = Tensor::wrap(a.data(), {2}, DType::F32), out = Tensor::wrap(b.data(), {2}, DType::F32);
  g.all_gather(out, in)->wait();
  EXPECT_EQ(rec.calls, 0);
  EXPECT_EQ(b, a);
}

}  // namespace
}  // namespace tripod
