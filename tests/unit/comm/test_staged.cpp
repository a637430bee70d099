// The staged communicator's own logic on the CPU (NOTE [Host-staged
// collectives]): a fake device whose "stream" is a queue that runs only when
// a fence is waited for, so a staging that copied before the producing
// kernel, copied back before wait(), drained the whole stream, or reused a
// pinned block while a copy still read it gives wrong numbers here. Threads
// as ranks over Gloo, 2-4 ranks; "device" tensors are host memory under a
// fake allocator registered for DeviceType::CUDA.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>

#include "base/error.h"
#include "comm/context.h"
#include "comm/staged/staged_communicator.h"
#include "tensor/allocator.h"
#include "testing/threads_as_ranks.h"

using namespace tripod;
using namespace std::chrono_literals;
using tripod::testing::run_ranks;

namespace {

class HostAsDevice : public Allocator {
 public:
  void* allocate(size_t bytes, Device) override { return std::malloc(bytes ? bytes : 1); }
  void deallocate(void* p, size_t, Device) noexcept override { std::free(p); }
};

// One rank's device: an in-order queue of work (the compute stream) that
// advances only as far as a waited-for fence.
class FakeDevice : public comm::StagingDevice {
 public:
  void enqueue(std::function<void()> f) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(f));
  }
  size_t queued() {
    std::lock_guard<std::mutex> lock(mu_);
    return done_ + queue_.size();
  }
  void run_until(size_t pos) {
    std::lock_guard<std::mutex> lock(mu_);
    while (done_ < pos && !queue_.empty()) {
      queue_.front()();
      queue_.pop_front();
      ++done_;
    }
  }
  void drain() { run_until(SIZE_MAX); }
  size_t done() {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }

  void* alloc_pinned(size_t bytes) override {
    ++pinned_live;
    return std::malloc(bytes);
  }
  void free_pinned(void* p) noexcept override {
    --pinned_live;
    std::free(p);
  }
  void copy_to_host(void* dst, const void* src, size_t n, Device d) override {
    EXPECT_EQ(d.type, DeviceType::CUDA);
    ++to_host;
    enqueue([=] { std::memcpy(dst, src, n); });
  }
  void copy_to_device(void* dst, const void* src, size_t n, Device d) override {
    ++to_device;
    enqueue([=] { std::memcpy(dst, src, n); });
  }
  class QueueFence : public comm::Fence {
   public:
    QueueFence(FakeDevice* d, size_t pos) : d_(d), pos_(pos) {}
    void wait() override { d_->run_until(pos_); }
    bool ready() override { return d_->done() >= pos_; }

   private:
    FakeDevice* d_;
    size_t pos_;
  };
  std::shared_ptr<comm::Fence> fence(Device) override { return std::make_shared<QueueFence>(this, queued()); }

  int pinned_live = 0, to_host = 0, to_device = 0;

 private:
  std::mutex mu_;
  std::deque<std::function<void()>> queue_;
  size_t done_ = 0;
};

HostAsDevice& fake_allocator() {
  static HostAsDevice* a = [] {
    auto* p = new HostAsDevice();
    register_allocator(DeviceType::CUDA, p);
    return p;
  }();
  return *a;
}

Tensor dev_tensor(int64_t n) {
  fake_allocator();
  return Tensor::empty({n}, DType::F32, Device::cuda(0));
}
// A "kernel" that fills t with v, queued on the fake stream (not run yet).
void produce(FakeDevice& d, Tensor t, float v) {
  d.enqueue([t, v] {
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = v + float(i % 7);
  });
}
// A "kernel" that reads t into out, queued after everything before it.
void consume(FakeDevice& d, Tensor t, std::vector<float>& out) {
  d.enqueue([t, &out] { out.assign(t.data<float>(), t.data<float>() + t.numel()); });
}

}  // namespace

TEST(StagedCommunicator, AllReduceOrderedWithTheStream) {
  for (int world : {2, 3, 4}) {
    run_ranks(world, 20s, [&](int rank, comm::DistContext& ctx) {
      auto dev = std::make_shared<FakeDevice>();
      auto c = comm::make_staged_communicator(ctx.world(), dev);
      const int64_t n = 1000;
      Tensor t = dev_tensor(n);
      produce(*dev, t, float(rank + 1));  // not run yet: the staging must run it first
      auto w = c->all_reduce(t);
      EXPECT_EQ(dev->to_host, 1);
      bool later = false;
      dev->enqueue([&] { later = true; });  // queued after the op's copy
      w->wait();
      EXPECT_FALSE(later) << "wait() synchronised the whole stream instead of the op's copies";
      EXPECT_EQ(dev->to_device, 1);
      std::vector<float> got;
      consume(*dev, t, got);
      dev->drain();
      const float sum = float(world * (world + 1) / 2);
      ASSERT_EQ(got.size(), size_t(n));
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[size_t(i)], sum + float(world * (i % 7))) << i;
      EXPECT_EQ(comm::staging_stats(*c).staged_ops, 1);
    });
  }
}

TEST(StagedCommunicator, EveryOpAtThreeRanks) {
  run_ranks(3, 20s, [](int rank, comm::DistContext& ctx) {
    const int n = 3;
    auto dev = std::make_shared<FakeDevice>();
    auto c = comm::make_staged_communicator(ctx.world(), dev);
    // all_gather: in(5) -> out(15)
    Tensor in = dev_tensor(5), out = dev_tensor(5 * n);
    produce(*dev, in, float(10 * rank));
    c->all_gather(out, in)->wait();
    std::vector<float> g;
    consume(*dev, out, g);
    dev->drain();
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < 5; ++i) EXPECT_EQ(g[size_t(r * 5 + i)], float(10 * r + i % 7));
    // reduce_scatter: in(3 x 4) -> out(4)
    Tensor rin = dev_tensor(4 * n), rout = dev_tensor(4);
    produce(*dev, rin, float(rank));
    c->reduce_scatter(rout, rin)->wait();
    std::vector<float> rs;
    consume(*dev, rout, rs);
    dev->drain();
    for (int i = 0; i < 4; ++i) EXPECT_EQ(rs[size_t(i)], float(0 + 1 + 2) + float(n * ((rank * 4 + i) % 7)));
    // broadcast from rank 1: only the root copies its buffer to the host.
    Tensor b = dev_tensor(6);
    produce(*dev, b, rank == 1 ? 100.0f : -1.0f);
    const int before = dev->to_host;
    c->broadcast(b, {1})->wait();
    EXPECT_EQ(dev->to_host - before, rank == 1 ? 1 : 0);
    std::vector<float> bc;
    consume(*dev, b, bc);
    dev->drain();
    for (int i = 0; i < 6; ++i) EXPECT_EQ(bc[size_t(i)], 100.0f + float(i % 7));
    // send / recv in a ring, both in flight before either wait (as the
    // pipeline schedules post them).
    Tensor s = dev_tensor(8), r = dev_tensor(8);
    produce(*dev, s, float(rank * 1000));
    auto ws = c->send(s, (rank + 1) % n, {7});
    auto wr = c->recv(r, (rank + n - 1) % n, {7});
    wr->wait();
    ws->wait();
    std::vector<float> rv;
    consume(*dev, r, rv);
    dev->drain();
    for (int i = 0; i < 8; ++i) EXPECT_EQ(rv[size_t(i)], float(((rank + n - 1) % n) * 1000 + i % 7));
    c->barrier();
  });
}

TEST(StagedCommunicator, PinnedBlocksReusedOnlyAfterTheirCopies) {
  run_ranks(2, 20s, [](int rank, comm::DistContext& ctx) {
    auto dev = std::make_shared<FakeDevice>();
    auto c = comm::make_staged_communicator(ctx.world(), dev);
    // Two ops back to back, the first's copy back still queued: the second
    // must not take the first's block (it would overwrite its result).
    Tensor a = dev_tensor(300), b = dev_tensor(300);
    produce(*dev, a, 1.0f);
    c->all_reduce(a)->wait();
    produce(*dev, b, 50.0f);
    c->all_reduce(b)->wait();
    EXPECT_EQ(comm::staging_stats(*c).pinned_allocs, 2);
    std::vector<float> ga, gb;
    consume(*dev, a, ga);
    consume(*dev, b, gb);
    dev->drain();
    for (int i = 0; i < 300; ++i) {
      ASSERT_EQ(ga[size_t(i)], 2.0f + 2.0f * float(i % 7));
      ASSERT_EQ(gb[size_t(i)], 100.0f + 2.0f * float(i % 7));
    }
    // Once the copies have run, blocks of the same rounded size are reused.
    for (int k = 0; k < 5; ++k) {
      Tensor t = dev_tensor(250 + k);  // 1000-1016 bytes: one 4 KiB block size
      produce(*dev, t, float(k));
      c->all_reduce(t)->wait();
      dev->drain();
    }
    const auto st = comm::staging_stats(*c);
    EXPECT_EQ(st.pinned_allocs, 2);
    EXPECT_EQ(st.reuses, 5);
    EXPECT_EQ(st.staged_ops, 7);
  });
}

TEST(StagedCommunicator, PollingFinishesLikeWait) {
  run_ranks(2, 20s, [](int rank, comm::DistContext& ctx) {
    auto dev = std::make_shared<FakeDevice>();
    auto c = comm::make_staged_communicator(ctx.world(), dev);
    Tensor t = dev_tensor(64);
    produce(*dev, t, float(rank));
    auto w = c->all_reduce(t);
    while (!w->is_completed()) std::this_thread::yield();
    EXPECT_EQ(dev->to_device, 1);  // the copy back is queued by the poll that saw completion
    w->wait();                     // and not again
    EXPECT_EQ(dev->to_device, 1);
    std::vector<float> got;
    consume(*dev, t, got);
    dev->drain();
    EXPECT_EQ(got[3], 1.0f + 6.0f);
  });
}

TEST(StagedCommunicator, HostTensorsPassThrough) {
  run_ranks(2, 20s, [](int rank, comm::DistContext& ctx) {
    auto dev = std::make_shared<FakeDevice>();
    auto c = comm::make_staged_communicator(ctx.world(), dev);
    Tensor h = Tensor::empty({4}, DType::F32);
    for (int i = 0; i < 4; ++i) h.data<float>()[i] = float(rank + i);
    c->all_reduce(h)->wait();
    EXPECT_EQ(h.data<float>()[2], 1.0f + 4.0f);
    EXPECT_EQ(dev->to_host + dev->to_device, 0);
    EXPECT_EQ(comm::staging_stats(*c).staged_ops, 0);
  });
}

TEST(StagedCommunicator, DistContextBuildsItForGlooOnDevice) {
  // What `--device cuda --distributed-backend gloo` does: DistContext makes
  // staged communicators for device jobs (size-1 groups stay local copies).
  thread_local std::shared_ptr<FakeDevice> mine;
  comm::register_staging_device(DeviceType::CUDA, [](const comm::CommConfig&) {
    if (!mine) mine = std::make_shared<FakeDevice>();
    return std::static_pointer_cast<comm::StagingDevice>(mine);
  });
  auto store = std::make_shared<comm::HashStore>(20s);
  std::vector<std::thread> ts;
  std::vector<std::string> errors(4);
  for (int r = 0; r < 4; ++r)
    ts.emplace_back([&, r] {
      try {
        auto ctx = comm::DistContext::init_with_store(r, 4, store, DeviceType::CUDA, 20s, 0, comm::CommBackend::Gloo);
        EXPECT_EQ(ctx->backend(), comm::CommBackend::Gloo);
        auto pair = ctx->new_group({{0, 1}, {2, 3}}, "tp");
        Tensor t = dev_tensor(10);
        produce(*mine, t, float(r));
        pair->all_reduce(t)->wait();
        std::vector<float> got;
        consume(*mine, t, got);
        mine->drain();
        const float want = r < 2 ? 1.0f : 5.0f;
        if (got[0] != want) errors[size_t(r)] = "rank " + std::to_string(r) + " got " + std::to_string(got[0]);
        if (comm::staging_stats(*pair).staged_ops != 1) errors[size_t(r)] += " not staged";
        mine.reset();
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  for (auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(comm::comm_backend_name(DeviceType::CUDA, comm::CommBackend::Gloo), "Gloo (host-staged)");
  EXPECT_EQ(comm::parse_comm_backend("nccl"), comm::CommBackend::Nccl);
  EXPECT_THROW(comm::parse_comm_backend("mpi"), Error);
}
