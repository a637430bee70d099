// Implementation of comm/ipc/ipc_communicator.h. See NOTE [IPC collectives].
#include "comm/ipc/ipc_communicator.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <mutex>
#include <new>
#include <vector>

#include "base/error.h"
#include "comm/ipc/shared_memory.h"
#include "comm/store.h"

namespace tripod::comm {

namespace {

constexpr int kMaxMembers = 64;
constexpr int kSlots = 2;

// One member's words in the control block, on its own cache line.
struct alignas(64) MemberWords {
  std::atomic<int64_t> ready{0};  // last op whose input is in the mailbox
  std::atomic<int64_t> done{0};   // last op whose reads of the mailboxes are queued
  std::atomic<uint32_t> bell{0};  // bumped on every post; the futex the peers sleep on
};
struct Control {
  std::atomic<uint32_t> aborted{0};
  MemberWords member[kMaxMembers];
};
static_assert(std::atomic<int64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "the control block lives in memory shared between processes");

class DoneWork : public Work {
 public:
  void wait() override {}
  bool is_completed() override { return true; }
};

using Clock = std::chrono::steady_clock;
using WordPtr = std::atomic<int64_t> MemberWords::*;

class IpcCommunicator : public Communicator {
 public:
  IpcCommunicator(const GroupSpec& spec, std::shared_ptr<Store> store, const CommConfig& config,
                  std::shared_ptr<Communicator> fallback, std::shared_ptr<IpcDevice> dev)
      : spec_(spec), store_(std::move(store)), fallback_(std::move(fallback)), dev_(std::move(dev)),
        timeout_(config.timeout), n_(int(spec.global_ranks.size())), me_(spec.group_rank),
        mailboxes_(size_t(n_), nullptr) {
    // The control block: member 0 creates it, the others map it by name.
    if (me_ == 0) {
      ctl_mem_ = SharedMemory::create(sizeof(Control));
      ctl_ = new (ctl_mem_.data()) Control();
      store_->set_str("ctl", ctl_mem_.name());
    } else {
      ctl_mem_ = SharedMemory::open(store_->get_str("ctl", timeout_), sizeof(Control));
      ctl_ = static_cast<Control*>(ctl_mem_.data());
    }
    for (int k = 0; k < kSlots; ++k) {
      std::string h;
      ready_[k] = dev_->event_create(&h);
      store_->set_str(fmt::format("ev/{}/ready{}", me_, k), h);
      done_[k] = dev_->event_create(&h);
      store_->set_str(fmt::format("ev/{}/done{}", me_, k), h);
    }
    peer_ready_.resize(size_t(n_));
    peer_done_.resize(size_t(n_));
    for (int p = 0; p < n_; ++p) {
      if (p == me_) continue;
      for (int k = 0; k < kSlots; ++k) {
        peer_ready_[p][k] = dev_->event_open(store_->get_str(fmt::format("ev/{}/ready{}", p, k), timeout_));
        peer_done_[p][k] = dev_->event_open(store_->get_str(fmt::format("ev/{}/done{}", p, k), timeout_));
      }
    }
    store_barrier("init");
    ctl_mem_.unlink();  // every member has it mapped (no-op off member 0)
  }

  ~IpcCommunicator() override {
    try {
      dev_->synchronize();
    } catch (...) {
    }
    for (int p = 0; p < n_; ++p)
      if (p != me_) {
        if (mailboxes_[p]) dev_->close(mailboxes_[p]);
        for (int k = 0; k < kSlots; ++k) {
          dev_->event_destroy(peer_ready_[p][k], true);
          dev_->event_destroy(peer_done_[p][k], true);
        }
      }
    if (mailboxes_[me_]) dev_->free(mailboxes_[me_]);
    for (int k = 0; k < kSlots; ++k) {
      dev_->event_destroy(ready_[k], false);
      dev_->event_destroy(done_[k], false);
    }
  }

  int rank() const override { return me_; }
  int size() const override { return n_; }
  const std::string& name() const override { return spec_.name; }

  std::shared_ptr<Work> all_reduce(Tensor& t, const AllReduceOptions& o) override {
    if (!dev_->serves(t)) return fallback_->all_reduce(t, o);
    const size_t bytes = t.nbytes();
    if (bytes == 0) return done();
    run("all_reduce", bytes, o.timeout, [&] { dev_->copy(mailboxes_[me_], t.raw(), bytes); },
        [&] { dev_->reduce(t.raw(), inputs(0), size_t(t.numel()), t.dtype(), o.op); });
    return done();
  }

  std::shared_ptr<Work> all_gather(Tensor& out, const Tensor& in, const AllGatherOptions& o) override {
    if (!dev_->serves(out) || !dev_->serves(in)) return fallback_->all_gather(out, in, o);
    TRIPOD_CHECK(out.dtype() == in.dtype() && out.numel() == in.numel() * n_,
                 "all_gather on group {}: output {} is not {} x input {}", spec_.describe(), out.str(), n_, in.str());
    const size_t bytes = in.nbytes();
    if (bytes == 0) return done();
    run("all_gather", bytes, o.timeout, [&] { dev_->copy(mailboxes_[me_], in.raw(), bytes); },
        [&] {
          for (int r = 0; r < n_; ++r) dev_->copy(static_cast<char*>(out.raw()) + size_t(r) * bytes, mailboxes_[r], bytes);
        });
    return done();
  }

  std::shared_ptr<Work> reduce_scatter(Tensor& out, const Tensor& in, const ReduceScatterOptions& o) override {
    if (!dev_->serves(out) || !dev_->serves(in)) return fallback_->reduce_scatter(out, in, o);
    TRIPOD_CHECK(out.dtype() == in.dtype() && in.numel() == out.numel() * n_,
                 "reduce_scatter on group {}: input {} is not {} x output {}", spec_.describe(), in.str(), n_,
                 out.str());
    const size_t bytes = in.nbytes();
    if (bytes == 0) return done();
    run("reduce_scatter", bytes, o.timeout, [&] { dev_->copy(mailboxes_[me_], in.raw(), bytes); },
        [&] { dev_->reduce(out.raw(), inputs(size_t(me_) * out.nbytes()), size_t(out.numel()), out.dtype(), o.op); });
    return done();
  }

  std::shared_ptr<Work> broadcast(Tensor& t, const BroadcastOptions& o) override {
    if (!dev_->serves(t)) return fallback_->broadcast(t, o);
    TRIPOD_CHECK(o.root >= 0 && o.root < n_, "broadcast on group {}: root {} is not a member", spec_.describe(), o.root);
    const size_t bytes = t.nbytes();
    if (bytes == 0) return done();
    run("broadcast", bytes, o.timeout,
        [&] {
          if (me_ == o.root) dev_->copy(mailboxes_[me_], t.raw(), bytes);
        },
        [&] {
          if (me_ != o.root) dev_->copy(t.raw(), mailboxes_[o.root], bytes);
        });
    return done();
  }

  std::shared_ptr<Work> send(const Tensor& t, int dst, const SendOptions& o) override {
    return fallback_->send(t, dst, o);
  }
  std::shared_ptr<Work> recv(Tensor& t, int src, const RecvOptions& o) override { return fallback_->recv(t, src, o); }
  std::shared_ptr<Work> all_to_all_v(Tensor& out, const Tensor& in, const std::vector<int64_t>& send_counts,
                                     const std::vector<int64_t>& recv_counts, const AllToAllOptions& o) override {
    return fallback_->all_to_all_v(out, in, send_counts, recv_counts, o);
  }
  void barrier(const BarrierOptions& o) override {
    run("barrier", 0, o.timeout, [] {}, [] {});
  }
  void abort() noexcept override {
    ctl_->aborted.store(1, std::memory_order_release);
    for (int p = 0; p < n_; ++p) {
      ctl_->member[p].bell.fetch_add(1, std::memory_order_acq_rel);
      futex_wake_all(&ctl_->member[p].bell);
    }
    fallback_->abort();
  }

 private:
  static std::shared_ptr<Work> done() { return std::make_shared<DoneWork>(); }

  std::vector<const void*> inputs(size_t offset) const {
    std::vector<const void*> v(static_cast<size_t>(n_), nullptr);
    for (int r = 0; r < n_; ++r) v[r] = static_cast<const char*>(mailboxes_[r]) + offset;
    return v;
  }

  template <class Fill, class Compute>
  void run(const char* op, size_t bytes, Millis timeout, Fill fill, Compute compute) {
    std::lock_guard<std::mutex> lock(mu_);
    const Millis limit = timeout.count() > 0 ? timeout : timeout_;
    const int64_t s = ++seq_;
    const int slot = int(s % kSlots), prev = int((s - 1) % kSlots);
    if (s > 1) {  // 1. nobody still reads this member's mailbox
      await(op, &MemberWords::done, s - 1, limit);
      for (int p = 0; p < n_; ++p)
        if (p != me_) dev_->wait(peer_done_[p][prev]);
    }
    if (bytes > capacity_) grow(bytes, limit);
    fill();  // 2.
    dev_->record(ready_[slot]);
    post(&MemberWords::ready, s);
    await(op, &MemberWords::ready, s, limit);  // 3.
    for (int p = 0; p < n_; ++p)
      if (p != me_) dev_->wait(peer_ready_[p][slot]);
    compute();  // 4.
    dev_->record(done_[slot]);
    post(&MemberWords::done, s);
  }

  void post(WordPtr word, int64_t value) {
    MemberWords& w = ctl_->member[me_];
    (w.*word).store(value, std::memory_order_release);
    w.bell.fetch_add(1, std::memory_order_acq_rel);
    futex_wake_all(&w.bell);
  }

  // Until every peer's `word` reaches `value` (host progress only).
  void await(const char* op, WordPtr word, int64_t value, Millis limit) {
    const auto deadline = Clock::now() + limit;
    for (int p = 0; p < n_; ++p) {
      if (p == me_) continue;
      MemberWords& w = ctl_->member[p];
      for (;;) {
        const uint32_t bell = w.bell.load(std::memory_order_acquire);
        if ((w.*word).load(std::memory_order_acquire) >= value) break;
        if (ctl_->aborted.load(std::memory_order_acquire))
          throw Error(fmt::format("rank {}: {} on group {} (IPC) was aborted: a member of the group failed",
                                  spec_.global_rank, op, spec_.describe()),
                      "look at the other ranks' output for the first error");
        if (Clock::now() >= deadline) throw timeout_error(op, word, value, limit);
        futex_wait(&w.bell, bell, std::chrono::milliseconds(50));
      }
    }
  }

  TimeoutError timeout_error(const char* op, WordPtr word, int64_t value, Millis limit) const {
    std::vector<int> missing;
    for (int p = 0; p < n_; ++p)
      if (p != me_ && (ctl_->member[p].*word).load() < value) missing.push_back(spec_.global_ranks[size_t(p)]);
    return TimeoutError(
        fmt::format("rank {}: {} number {} on group {} (IPC) timed out after {:.1f} s: rank(s) [{}] never reached it",
                    spec_.global_rank, op, value, spec_.describe(), limit.count() / 1e3, fmt::join(missing, ", ")),
        "those ranks are stuck or dead, or called the collectives in another order; raise "
        "--distributed-timeout-minutes only if they are just slow");
  }

  // Collective: every member grows at the same op (sizes agree). The device
  // is synchronised first, so no read of an old mailbox is still queued.
  void grow(size_t bytes, Millis limit) {
    dev_->synchronize();
    for (int p = 0; p < n_; ++p)
      if (p != me_ && mailboxes_[p]) {
        dev_->close(mailboxes_[p]);
        mailboxes_[p] = nullptr;
      }
    store_barrier(fmt::format("grow{}/closed", generation_));
    if (mailboxes_[me_]) dev_->free(mailboxes_[me_]);
    mailboxes_[me_] = nullptr;
    constexpr size_t kMiB = size_t(1) << 20;
    capacity_ = (std::max(bytes, 2 * capacity_) + kMiB - 1) / kMiB * kMiB;
    std::string handle;
    mailboxes_[me_] = dev_->alloc(capacity_, &handle);
    store_->set_str(fmt::format("grow{}/mailbox{}", generation_, me_), handle);
    for (int p = 0; p < n_; ++p)
      if (p != me_) mailboxes_[p] = dev_->open(store_->get_str(fmt::format("grow{}/mailbox{}", generation_, p), limit));
    store_barrier(fmt::format("grow{}/opened", generation_));
    dev_->forget_name(handle);
    ++generation_;
  }

  void store_barrier(const std::string& name) {
    if (store_->add(name + "/count", 1) == n_) store_->set_str(name + "/go", "1");
    store_->wait({name + "/go"}, timeout_);
  }

  GroupSpec spec_;
  std::shared_ptr<Store> store_;
  std::shared_ptr<Communicator> fallback_;
  std::shared_ptr<IpcDevice> dev_;
  Millis timeout_;
  int n_, me_;
  SharedMemory ctl_mem_;
  Control* ctl_ = nullptr;
  std::mutex mu_;
  int64_t seq_ = 0;
  size_t capacity_ = 0;
  int generation_ = 0;
  std::vector<void*> mailboxes_;  // by member; this member's own at me_
  std::array<void*, kSlots> ready_{}, done_{};
  std::vector<std::array<void*, kSlots>> peer_ready_, peer_done_;
};

}  // namespace

std::shared_ptr<Communicator> make_ipc_communicator(const GroupSpec& spec, std::shared_ptr<Store> store,
                                                    const CommConfig& config, std::shared_ptr<Communicator> fallback,
                                                    std::shared_ptr<IpcDevice> device) {
  if (!device || spec.global_ranks.size() > size_t(kMaxMembers) || spec.global_ranks.size() < 2) return fallback;
  auto ps = std::make_shared<PrefixStore>("ipc/", std::move(store));
  const std::string mine = device->location();
  ps->set_str(fmt::format("location{}", spec.group_rank), mine);
  bool shared = true;
  for (size_t r = 0; r < spec.global_ranks.size(); ++r)
    if (ps->get_str(fmt::format("location{}", r), config.timeout) != mine) shared = false;
  if (!shared) return fallback;
  return std::make_shared<IpcCommunicator>(spec, std::move(ps), config, std::move(fallback), std::move(device));
}

bool is_ipc_communicator(const Communicator& comm) { return dynamic_cast<const IpcCommunicator*>(&comm) != nullptr; }

}  // namespace tripod::comm
