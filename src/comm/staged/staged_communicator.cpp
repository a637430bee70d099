// Implementation of comm/staged/staged_communicator.h. See NOTE [Host-staged collectives].
#include "comm/staged/staged_communicator.h"

#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "base/error.h"
#include "comm/context.h"

namespace tripod::comm {

namespace {

struct Registry {
  std::mutex mu;
  std::map<DeviceType, StagingDeviceFactory> factories;
};
Registry& registry() {
  static Registry r;
  return r;
}

// Pinned blocks are kept by rounded size (as the CUDA caching allocator
// rounds): the buckets of successive iterations then hit the same blocks.
size_t round_size(size_t bytes) {
  constexpr size_t kSmall = 4096, kLarge = size_t(1) << 20;
  if (bytes < kLarge) return (bytes + kSmall - 1) / kSmall * kSmall;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

// State shared by the communicator and its Works (a Work may outlive it).
struct State {
  std::shared_ptr<Communicator> host;
  std::shared_ptr<StagingDevice> dev;
  std::mutex mu;
  struct Block {
    void* p;
    std::shared_ptr<Fence> fence;  // copies still reading the block; null = free now
  };
  std::multimap<size_t, Block> free;  // rounded size -> blocks
  StagingStats stats;

  void* acquire(size_t bytes) {
    const size_t size = round_size(bytes);
    std::lock_guard<std::mutex> lock(mu);
    auto [lo, hi] = free.equal_range(size);
    for (auto it = lo; it != hi; ++it) {
      if (it->second.fence && !it->second.fence->ready()) continue;
      void* p = it->second.p;
      free.erase(it);
      ++stats.reuses;
      return p;
    }
    void* p = dev->alloc_pinned(size);
    stats.pinned_bytes += size;
    ++stats.pinned_allocs;
    return p;
  }
  void release(void* p, size_t bytes, std::shared_ptr<Fence> fence) {
    std::lock_guard<std::mutex> lock(mu);
    free.emplace(round_size(bytes), Block{p, std::move(fence)});
  }
  ~State() {
    for (auto& [size, b] : free) {
      if (b.fence) b.fence->wait();
      dev->free_pinned(b.p);
    }
  }
};

// One staged buffer of an op: the pinned block and, for an output on the
// device, where its result goes back to.
struct Stage {
  void* host = nullptr;
  size_t bytes = 0;
  void* device_dst = nullptr;  // null: nothing to copy back (inputs, sends)
  Device device;
};

class StagedWork : public Work {
 public:
  StagedWork(std::shared_ptr<State> st, std::shared_ptr<Work> inner, std::vector<Stage> stages)
      : st_(std::move(st)), inner_(std::move(inner)), stages_(std::move(stages)) {}

  void wait() override {
    if (finished_) return;
    inner_->wait();  // throws on timeout / failure; the blocks are then left alone
    finish();
  }
  bool is_completed() override {
    if (finished_) return true;
    if (!inner_->is_completed()) return false;
    finish();
    return true;
  }

 private:
  void finish() {
    Device device;
    bool copied = false;
    for (const Stage& s : stages_)
      if (s.device_dst && s.bytes) {
        st_->dev->copy_to_device(s.device_dst, s.host, s.bytes, s.device);
        device = s.device;
        copied = true;
      }
    // One fence after the last copy covers every output block of this op.
    std::shared_ptr<Fence> fence = copied ? st_->dev->fence(device) : nullptr;
    for (const Stage& s : stages_)
      if (s.host) st_->release(s.host, s.bytes, s.device_dst ? fence : nullptr);
    stages_.clear();
    finished_ = true;
  }

  std::shared_ptr<State> st_;
  std::shared_ptr<Work> inner_;
  std::vector<Stage> stages_;
  bool finished_ = false;
};

class StagedCommunicator : public Communicator {
 public:
  explicit StagedCommunicator(std::shared_ptr<State> st) : st_(std::move(st)) {}

  int rank() const override { return st_->host->rank(); }
  int size() const override { return st_->host->size(); }
  const std::string& name() const override { return st_->host->name(); }
  const StagingStats& stats() const { return st_->stats; }

  std::shared_ptr<Work> all_reduce(Tensor& t, const AllReduceOptions& o) override {
    Op op(st_);
    Tensor h = op.inout(t);
    op.ready();
    return op.work(st_->host->all_reduce(h, o));
  }
  std::shared_ptr<Work> all_gather(Tensor& out, const Tensor& in, const AllGatherOptions& o) override {
    Op op(st_);
    Tensor hi = op.in(in), ho = op.out(out);
    op.ready();
    return op.work(st_->host->all_gather(ho, hi, o));
  }
  std::shared_ptr<Work> reduce_scatter(Tensor& out, const Tensor& in, const ReduceScatterOptions& o) override {
    Op op(st_);
    Tensor hi = op.in(in), ho = op.out(out);
    op.ready();
    return op.work(st_->host->reduce_scatter(ho, hi, o));
  }
  std::shared_ptr<Work> broadcast(Tensor& t, const BroadcastOptions& o) override {
    Op op(st_);
    // Only the root's data is read; the others' is overwritten.
    Tensor h = o.root == rank() ? op.inout(t) : op.out(t);
    op.ready();
    return op.work(st_->host->broadcast(h, o));
  }
  std::shared_ptr<Work> send(const Tensor& t, int dst, const SendOptions& o) override {
    Op op(st_);
    Tensor h = op.in(t);
    op.ready();
    return op.work(st_->host->send(h, dst, o));
  }
  std::shared_ptr<Work> recv(Tensor& t, int src, const RecvOptions& o) override {
    Op op(st_);
    Tensor h = op.out(t);
    return op.work(st_->host->recv(h, src, o));
  }
  void barrier(const BarrierOptions& o) override { st_->host->barrier(o); }
  void abort() noexcept override { st_->host->abort(); }

 private:
  // The staging of one call: host views of its tensors, then one fence wait
  // for all device->host copies before the host op starts.
  class Op {
   public:
    explicit Op(std::shared_ptr<State> st) : st_(std::move(st)) {}
    Tensor in(const Tensor& t) { return stage(t, true, false); }
    Tensor out(const Tensor& t) { return stage(t, false, true); }
    Tensor inout(const Tensor& t) { return stage(t, true, true); }
    void ready() {
      if (to_host_) st_->dev->fence(*to_host_)->wait();
    }
    std::shared_ptr<Work> work(std::shared_ptr<Work> inner) {
      if (stages_.empty()) return inner;
      return std::make_shared<StagedWork>(st_, std::move(inner), std::move(stages_));
    }

   private:
    Tensor stage(const Tensor& t, bool read, bool write) {
      TRIPOD_CHECK(t.defined(), "staged collective: undefined tensor");
      if (t.is_cpu()) return t;
      if (stages_.empty()) {
        std::lock_guard<std::mutex> lock(st_->mu);
        ++st_->stats.staged_ops;
      }
      Stage s;
      s.bytes = t.nbytes();
      s.device = t.device();
      if (s.bytes == 0) return Tensor::empty({0}, t.dtype());
      s.host = st_->acquire(s.bytes);
      if (write) s.device_dst = t.raw();
      if (read) {
        st_->dev->copy_to_host(s.host, t.raw(), s.bytes, s.device);
        to_host_ = s.device;
      }
      stages_.push_back(s);
      return Tensor::wrap(s.host, {t.numel()}, t.dtype(), Device::cpu());
    }
    std::shared_ptr<State> st_;
    std::vector<Stage> stages_;
    std::optional<Device> to_host_;
  };

  std::shared_ptr<State> st_;
};

}  // namespace

bool register_staging_device(DeviceType device, StagingDeviceFactory factory) {
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().factories[device] = std::move(factory);
  return true;
}

bool has_staging_device(DeviceType device) {
  std::lock_guard<std::mutex> lock(registry().mu);
  return registry().factories.count(device) > 0;
}

std::shared_ptr<StagingDevice> make_staging_device(DeviceType device, const CommConfig& config) {
  StagingDeviceFactory f;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    auto it = registry().factories.find(device);
    TRIPOD_CHECK_HINT(it != registry().factories.end(), "rebuild with -DTRIPOD_CUDA=ON",
                      "this tripod build cannot stage device buffers for a host communicator");
    f = it->second;
  }
  return f(config);
}

std::shared_ptr<Communicator> make_staged_communicator(std::shared_ptr<Communicator> host,
                                                       std::shared_ptr<StagingDevice> device) {
  auto st = std::make_shared<State>();
  st->host = std::move(host);
  st->dev = std::move(device);
  return std::make_shared<StagedCommunicator>(std::move(st));
}

StagingStats staging_stats(const Communicator& comm) {
  if (auto* s = dynamic_cast<const StagedCommunicator*>(&comm)) return s->stats();
  return {};
}

}  // namespace tripod::comm
