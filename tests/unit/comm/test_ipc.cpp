// The IPC communicator (NOTE [IPC collectives]), threads as ranks:
//  - over the CPU IpcDevice (real POSIX shared memory): every collective,
//    several dtypes and sizes (mailboxes growing), against values computed
//    here, and bit-identical on every rank;
//  - over a fake GPU whose ranks' streams are queues that one "GPU" thread
//    runs in a random order, where an event wait orders a stream after
//    another rank's record exactly as cudaStreamWaitEvent does: a protocol
//    that waited for an event before its record, or reused a mailbox or an
//    event slot too early, reads stale data here. The host never runs a
//    queue itself except in synchronize().
//  - timeouts name the missing rank; abort() ends a peer's wait; members in
//    different memories get the fallback communicator.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <random>
#include <thread>

#include "base/error.h"
#include "comm/context.h"
#include "comm/gloo/reduce_ops.h"
#include "comm/ipc/ipc_communicator.h"
#include "comm/ipc/ipc_device.h"
#include "testing/threads_as_ranks.h"

using namespace tripod;
using namespace std::chrono_literals;
using tripod::testing::run_ranks;

namespace {

std::shared_ptr<comm::Communicator> make(comm::DistContext& ctx, int rank, const std::string& tag,
                                         std::shared_ptr<comm::IpcDevice> dev, comm::Millis timeout = comm::Millis{20000}) {
  comm::GroupSpec spec;
  spec.name = "ipc";
  for (int r = 0; r < ctx.world_size(); ++r) spec.global_ranks.push_back(r);
  spec.group_rank = rank;
  spec.global_rank = rank;
  comm::CommConfig config;
  config.timeout = timeout;
  return comm::make_ipc_communicator(spec, std::make_shared<comm::PrefixStore>(tag + "/", ctx.store()), config,
                                     ctx.world(), std::move(dev));
}

float value(int rank, int64_t i) { return float((rank + 1) * 3 + i % 11) * 0.25f; }

// One rank's script: every collective in turn, sizes that make the mailbox
// grow, checked against host arithmetic. `produce` / `consume` put the
// input's writes and the output's reads on the rank's stream (identity on CPU).
void script(comm::Communicator& c, int rank, int world, const std::function<void(std::function<void()>)>& on_stream,
            const std::function<void()>& sync) {
  for (int64_t n : {int64_t(1), int64_t(1000), int64_t(300000), int64_t(7), int64_t(1) << 20}) {
    // all_reduce f32 sum and max
    Tensor t = Tensor::empty({n}, DType::F32);
    on_stream([=] {
      for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = value(rank, i);
    });
    c.all_reduce(t)->wait();
    Tensor m = Tensor::empty({n}, DType::F32);
    on_stream([=] {
      for (int64_t i = 0; i < n; ++i) m.data<float>()[i] = value(rank, i) * ((rank % 2) ? -1.f : 1.f);
    });
    comm::AllReduceOptions mx;
    mx.op = comm::ReduceOp::Max;
    c.all_reduce(m, mx)->wait();
    // all_gather i64, reduce_scatter bf16, broadcast from the last rank
    Tensor in = Tensor::empty({n}, DType::I64), out = Tensor::empty({n * world}, DType::I64);
    on_stream([=] {
      for (int64_t i = 0; i < n; ++i) in.data<int64_t>()[i] = rank * 1000003 + i;
    });
    c.all_gather(out, in)->wait();
    Tensor rs_in = Tensor::empty({n * world}, DType::BF16), rs_out = Tensor::empty({n}, DType::BF16);
    on_stream([=] {
      // 1 + k/32: sums of up to 4 are exact in bf16, in any order (Gloo's too)
      for (int64_t i = 0; i < n * world; ++i) rs_in.data_u16()[i] = uint16_t(0x3f80 + 4 * ((i + rank) % 16));
    });
    c.reduce_scatter(rs_out, rs_in)->wait();
    Tensor b = Tensor::empty({n}, DType::F32);
    on_stream([=] {
      for (int64_t i = 0; i < n; ++i) b.data<float>()[i] = rank == world - 1 ? float(i) : -1.f;
    });
    comm::BroadcastOptions bo;
    bo.root = world - 1;
    c.broadcast(b, bo)->wait();
    sync();
    for (int64_t i = 0; i < n; ++i) {
      float sum = 0, best = -1e30f;
      for (int r = 0; r < world; ++r) {
        sum += value(r, i);
        best = std::max(best, value(r, i) * ((r % 2) ? -1.f : 1.f));
      }
      ASSERT_EQ(t.data<float>()[i], sum) << "all_reduce n=" << n << " i=" << i << " rank " << rank;
      ASSERT_EQ(m.data<float>()[i], best) << "max n=" << n << " i=" << i;
      ASSERT_EQ(b.data<float>()[i], float(i)) << "broadcast n=" << n << " i=" << i;
    }
    for (int r = 0; r < world; ++r)
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(out.data<int64_t>()[r * n + i], r * 1000003 + i) << "all_gather n=" << n;
    const comm::ReduceFn add = comm::reduce_fn(DType::BF16, comm::ReduceOp::Sum);
    for (int64_t i = 0; i < n; ++i) {
      uint16_t acc = uint16_t(0x3f80 + 4 * ((rank * n + i) % 16));
      for (int r = 1; r < world; ++r) {
        const uint16_t v = uint16_t(0x3f80 + 4 * ((rank * n + i + r) % 16));
        add(&acc, &acc, &v, 1);
      }
      ASSERT_EQ(rs_out.data_u16()[i], acc) << "reduce_scatter n=" << n << " i=" << i;
    }
  }
  c.barrier();
}

TEST(IpcCommunicator, CpuSharedMemoryEveryCollective) {
  for (int world : {2, 3, 4}) {
    run_ranks(world, 60s, [&](int rank, comm::DistContext& ctx) {
      auto c = make(ctx, rank, "cpu", comm::make_ipc_device(DeviceType::CPU, comm::CommConfig{}));
      ASSERT_TRUE(comm::is_ipc_communicator(*c));
      script(*c, rank, world, [](std::function<void()> f) { f(); }, [] {});
    });
  }
}

// The CPU device with a small mailbox limit: ops above it take the group's
// fallback (Gloo), interleaved with the ops that stay on the mailboxes.
class LimitedCpu : public comm::IpcDevice {
 public:
  explicit LimitedCpu(size_t limit) : cpu_(comm::make_ipc_device(DeviceType::CPU, comm::CommConfig{})), limit_(limit) {}
  std::string location() override { return cpu_->location(); }
  bool serves(const Tensor& t) const override { return cpu_->serves(t); }
  size_t mailbox_limit() override { return limit_; }
  void* alloc(size_t bytes, std::string* handle) override {
    EXPECT_LE(bytes, size_t(1) << 20);  // grown for the small ops only
    return cpu_->alloc(bytes, handle);
  }
  void free(void* p) noexcept override { cpu_->free(p); }
  void* open(const std::string& handle) override { return cpu_->open(handle); }
  void close(void* p) noexcept override { cpu_->close(p); }
  void forget_name(const std::string& handle) noexcept override { cpu_->forget_name(handle); }
  void* event_create(std::string* handle) override { return cpu_->event_create(handle); }
  void* event_open(const std::string& handle) override { return cpu_->event_open(handle); }
  void event_destroy(void* e, bool opened) noexcept override { cpu_->event_destroy(e, opened); }
  void record(void* e) override { cpu_->record(e); }
  void wait(void* e) override { cpu_->wait(e); }
  void copy(void* dst, const void* src, size_t bytes) override { cpu_->copy(dst, src, bytes); }
  void reduce(void* out, const std::vector<const void*>& ins, size_t count, DType dtype, comm::ReduceOp op) override {
    cpu_->reduce(out, ins, count, dtype, op);
  }
  void synchronize() override { cpu_->synchronize(); }

 private:
  std::shared_ptr<comm::IpcDevice> cpu_;
  size_t limit_;
};

TEST(IpcCommunicator, OpsAboveTheMailboxLimitTakeTheFallback) {
  run_ranks(3, 60s, [&](int rank, comm::DistContext& ctx) {
    auto c = make(ctx, rank, "limited", std::make_shared<LimitedCpu>(8192));
    ASSERT_TRUE(comm::is_ipc_communicator(*c));
    script(*c, rank, 3, [](std::function<void()> f) { f(); }, [] {});
  });
}

// A GPU shared by the thread ranks: each rank's stream is a queue; one thread
// runs the first item of a random runnable queue at a time. An event wait is
// an item that is runnable once the recording rank's stream has run past the
// position of the record that was the last one when the wait was queued.
class FakeGpu {
 public:
  explicit FakeGpu(int ranks, unsigned seed) : queues_(size_t(ranks)), ran_(size_t(ranks), 0), pushed_(size_t(ranks), 0),
                                               rng_(seed) {
    worker_ = std::thread([this] { loop(); });
  }
  ~FakeGpu() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  void push(int rank, std::function<void()> f, int dep_rank = -1, size_t dep_pos = 0) {
    std::lock_guard<std::mutex> lock(mu_);
    queues_[size_t(rank)].push_back({std::move(f), dep_rank, dep_pos});
    ++pushed_[size_t(rank)];
    cv_.notify_all();
  }
  int new_event() {
    std::lock_guard<std::mutex> lock(mu_);
    events_[next_] = {-1, 0};
    return next_++;
  }
  void record(int rank, int event) {
    std::lock_guard<std::mutex> lock(mu_);
    events_[event] = {rank, pushed_[size_t(rank)]};
  }
  void wait(int rank, int event) {
    std::pair<int, size_t> e;
    {
      std::lock_guard<std::mutex> lock(mu_);
      e = events_[event];
    }
    push(rank, [] {}, e.first, e.second);
  }
  void synchronize(int rank) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return queues_[size_t(rank)].empty(); });
  }

 private:
  struct Item {
    std::function<void()> run;
    int dep_rank;
    size_t dep_pos;
  };
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      std::vector<size_t> runnable;
      for (size_t r = 0; r < queues_.size(); ++r)
        if (!queues_[r].empty()) {
          const Item& it = queues_[r].front();
          if (it.dep_rank < 0 || ran_[size_t(it.dep_rank)] >= it.dep_pos) runnable.push_back(r);
        }
      if (runnable.empty()) {
        cv_.wait_for(lock, 1ms);
        continue;
      }
      const size_t r = runnable[std::uniform_int_distribution<size_t>(0, runnable.size() - 1)(rng_)];
      Item it = std::move(queues_[r].front());
      it.run();
      queues_[r].pop_front();
      ++ran_[r];
      cv_.notify_all();
      if (rng_() % 4 == 0) {  // let the hosts run ahead now and then
        lock.unlock();
        std::this_thread::sleep_for(std::chrono::microseconds(rng_() % 200));
        lock.lock();
      }
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::deque<Item>> queues_;
  std::vector<size_t> ran_, pushed_;
  std::map<int, std::pair<int, size_t>> events_;
  int next_ = 1;
  std::mt19937 rng_;
  bool stop_ = false;
  std::thread worker_;
};

// One rank's view of the FakeGpu as an IpcDevice (host memory, one process).
class FakeGpuDevice : public comm::IpcDevice {
 public:
  FakeGpuDevice(FakeGpu* gpu, int rank) : gpu_(gpu), rank_(rank) {}
  std::string location() override { return "fake gpu"; }
  bool serves(const Tensor& t) const override { return t.is_cpu(); }
  size_t mailbox_limit() override { return size_t(64) << 20; }
  void* alloc(size_t bytes, std::string* handle) override {
    void* p = std::malloc(bytes);
    std::memset(p, 0xff, bytes);
    *handle = std::to_string(reinterpret_cast<uintptr_t>(p));
    return p;
  }
  void free(void* p) noexcept override { std::free(p); }
  void* open(const std::string& handle) override { return reinterpret_cast<void*>(std::stoull(handle)); }
  void close(void*) noexcept override {}
  void* event_create(std::string* handle) override {
    const int e = gpu_->new_event();
    *handle = std::to_string(e);
    return reinterpret_cast<void*>(intptr_t(e));
  }
  void* event_open(const std::string& handle) override { return reinterpret_cast<void*>(intptr_t(std::stoi(handle))); }
  void event_destroy(void*, bool) noexcept override {}
  void record(void* e) override { gpu_->record(rank_, int(reinterpret_cast<intptr_t>(e))); }
  void wait(void* e) override { gpu_->wait(rank_, int(reinterpret_cast<intptr_t>(e))); }
  void copy(void* dst, const void* src, size_t bytes) override {
    gpu_->push(rank_, [=] { std::memmove(dst, src, bytes); });
  }
  void reduce(void* out, const std::vector<const void*>& ins, size_t count, DType dtype, comm::ReduceOp op) override {
    gpu_->push(rank_, [=] {
      const comm::ReduceFn f = comm::reduce_fn(dtype, op);
      std::vector<char> acc(count * dtype_size(dtype));
      std::memcpy(acc.data(), ins[0], acc.size());
      for (size_t r = 1; r < ins.size(); ++r) f(acc.data(), acc.data(), ins[r], count);
      std::memcpy(out, acc.data(), acc.size());
    });
  }
  void synchronize() override { gpu_->synchronize(rank_); }

 private:
  FakeGpu* gpu_;
  int rank_;
};

TEST(IpcCommunicator, EventOrderingOnAnAsynchronousDevice) {
  for (int world : {2, 3}) {
    for (unsigned seed : {1u, 2u, 3u}) {
      FakeGpu gpu(world, seed);
      run_ranks(world, 60s, [&](int rank, comm::DistContext& ctx) {
        auto c = make(ctx, rank, "gpu", std::make_shared<FakeGpuDevice>(&gpu, rank));
        script(*c, rank, world, [&](std::function<void()> f) { gpu.push(rank, std::move(f)); },
               [&] { gpu.synchronize(rank); });
        gpu.synchronize(rank);
      });
    }
  }
}

TEST(IpcCommunicator, TimeoutNamesTheMissingRank) {
  run_ranks(2, 30s, [&](int rank, comm::DistContext& ctx) {
    auto c = make(ctx, rank, "timeout", comm::make_ipc_device(DeviceType::CPU, comm::CommConfig{}), comm::Millis{400});
    Tensor t = Tensor::zeros({16}, DType::F32);
    c->all_reduce(t)->wait();  // both
    if (rank == 1) return;     // rank 1 never calls the second one
    try {
      c->all_reduce(t)->wait();
      FAIL() << "expected a timeout";
    } catch (const TimeoutError& e) {
      EXPECT_NE(std::string(e.what()).find("global rank(s) [1] of group ipc never reached all_reduce #2"),
                std::string::npos)
          << e.what();
    }
  });
}

TEST(IpcCommunicator, MembersThatDisagreeOnTheSizeFailNamingBoth) {
  for (bool grows : {false, true}) {  // a size past the mailbox makes one member grow it alone
    run_ranks(2, 30s, [&](int rank, comm::DistContext& ctx) {
      auto c = make(ctx, rank, grows ? "size_grow" : "size", comm::make_ipc_device(DeviceType::CPU, comm::CommConfig{}));
      Tensor t = Tensor::zeros({1024}, DType::F32);
      c->all_reduce(t)->wait();
      Tensor u = Tensor::zeros({rank == 1 ? (grows ? int64_t(1) << 20 : 512) : 1024}, DType::F32);
      try {
        c->all_reduce(u)->wait();
        FAIL() << "expected a size mismatch";
      } catch (const Error& e) {
        const std::string other = rank == 0 ? (grows ? "4194304" : "2048") : "4096";
        EXPECT_NE(std::string(e.what()).find("global rank " + std::to_string(1 - rank) + " called all_reduce #2 with " +
                                             other + " bytes"),
                  std::string::npos)
            << e.what();
        EXPECT_NE(e.hint().find("start every rank with the same flags"), std::string::npos) << e.what();
      }
    });
  }
}

TEST(IpcCommunicator, AbortEndsAPeersWait) {
  run_ranks(2, 30s, [&](int rank, comm::DistContext& ctx) {
    auto c = make(ctx, rank, "abort", comm::make_ipc_device(DeviceType::CPU, comm::CommConfig{}));
    Tensor t = Tensor::zeros({16}, DType::F32);
    c->all_reduce(t)->wait();
    if (rank == 1) {
      std::this_thread::sleep_for(200ms);
      c->abort();
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    EXPECT_THROW(c->all_reduce(t)->wait(), Error);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  });
}

class Elsewhere : public FakeGpuDevice {
 public:
  Elsewhere(int rank) : FakeGpuDevice(nullptr, rank), rank_(rank) {}
  std::string location() override { return "memory " + std::to_string(rank_); }

 private:
  int rank_;
};

TEST(IpcCommunicator, MembersInDifferentMemoriesGetTheFallback) {
  run_ranks(2, 30s, [&](int rank, comm::DistContext& ctx) {
    auto c = make(ctx, rank, "apart", std::make_shared<Elsewhere>(rank));
    EXPECT_EQ(c.get(), ctx.world().get());  // the fallback itself
  });
}

}  // namespace
