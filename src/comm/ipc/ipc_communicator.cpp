// Implementation of comm/ipc/ipc_communicator.h. See NOTE [IPC collectives].
#include "comm/ipc/ipc_communicator.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <array>
#include <atomic>
#include <chrono>
#include <mutex>
#include <new>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "comm/missing_ranks.h"
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
  std::atomic<int32_t> pid{0};    // the member's process, to tell a dead peer from a slow one
  // What the member is calling now: op s's kind and size, written before
  // intent = s, so that members that disagree fail at once, naming both.
  std::atomic<int64_t> intent{0};
  std::atomic<int64_t> intent_bytes{0};
  std::atomic<int32_t> intent_op{0};
  std::atomic<int64_t> grow_closed{0};  // mailbox generations: old mappings closed
  std::atomic<int64_t> grow_opened{0};  // new mailboxes mapped
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
                  std::shared_ptr<Communicator> fallback, std::shared_ptr<IpcDevice> dev, size_t limit)
      : limit_(limit), spec_(spec), store_(std::move(store)), fallback_(std::move(fallback)), dev_(std::move(dev)),
        timeout_(config.timeout), recorder_(config.recorder), n_(int(spec.global_ranks.size())), me_(spec.group_rank),
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
    ctl_->member[me_].pid.store(int32_t(::getpid()), std::memory_order_release);
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
    const size_t bytes = t.nbytes();
    if (!dev_->serves(t) || bytes > limit_) return fallback_->all_reduce(t, o);
    if (bytes == 0) return done();
    run(kAllReduce, bytes, o.timeout, [&] { dev_->copy(mailboxes_[me_], t.raw(), bytes); },
        [&] { dev_->reduce(t.raw(), inputs(0), size_t(t.numel()), t.dtype(), o.op); });
    return done();
  }

  std::shared_ptr<Work> all_gather(Tensor& out, const Tensor& in, const AllGatherOptions& o) override {
    if (!dev_->serves(out) || !dev_->serves(in) || in.nbytes() > limit_) return fallback_->all_gather(out, in, o);
    TRIPOD_CHECK(out.dtype() == in.dtype() && out.numel() == in.numel() * n_,
                 "all_gather on group {}: output {} is not {} x input {}", spec_.describe(), out.str(), n_, in.str());
    const size_t bytes = in.nbytes();
    if (bytes == 0) return done();
    run(kAllGather, bytes, o.timeout, [&] { dev_->copy(mailboxes_[me_], in.raw(), bytes); },
        [&] {
          for (int r = 0; r < n_; ++r) dev_->copy(static_cast<char*>(out.raw()) + size_t(r) * bytes, mailboxes_[r], bytes);
        });
    return done();
  }

  std::shared_ptr<Work> reduce_scatter(Tensor& out, const Tensor& in, const ReduceScatterOptions& o) override {
    if (!dev_->serves(out) || !dev_->serves(in) || in.nbytes() > limit_) return fallback_->reduce_scatter(out, in, o);
    TRIPOD_CHECK(out.dtype() == in.dtype() && in.numel() == out.numel() * n_,
                 "reduce_scatter on group {}: input {} is not {} x output {}", spec_.describe(), in.str(), n_,
                 out.str());
    const size_t bytes = in.nbytes();
    if (bytes == 0) return done();
    run(kReduceScatter, bytes, o.timeout, [&] { dev_->copy(mailboxes_[me_], in.raw(), bytes); },
        [&] { dev_->reduce(out.raw(), inputs(size_t(me_) * out.nbytes()), size_t(out.numel()), out.dtype(), o.op); });
    return done();
  }

  std::shared_ptr<Work> broadcast(Tensor& t, const BroadcastOptions& o) override {
    if (!dev_->serves(t) || t.nbytes() > limit_) return fallback_->broadcast(t, o);
    TRIPOD_CHECK(o.root >= 0 && o.root < n_, "broadcast on group {}: root {} is not a member", spec_.describe(), o.root);
    const size_t bytes = t.nbytes();
    if (bytes == 0) return done();
    run(kBroadcast, bytes, o.timeout,
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
    run(kBarrier, 0, o.timeout, [] {}, [] {});
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
  // Every op is complete on return: one handle, not one per op.
  std::shared_ptr<Work> done() const { return completed_; }

  std::vector<const void*> inputs(size_t offset) const {
    std::vector<const void*> v(static_cast<size_t>(n_), nullptr);
    for (int r = 0; r < n_; ++r) v[r] = static_cast<const char*>(mailboxes_[r]) + offset;
    return v;
  }

  enum Op : int32_t { kAllReduce = 1, kAllGather, kReduceScatter, kBroadcast, kBarrier };
  static const char* op_name(int32_t op) {
    switch (op) {
      case kAllReduce: return "all_reduce";
      case kAllGather: return "all_gather";
      case kReduceScatter: return "reduce_scatter";
      case kBroadcast: return "broadcast";
      default: return "barrier";
    }
  }

  // What an op is, in the words of the other communicators' errors.
  struct Current {
    int64_t seq;
    int32_t op;
    size_t bytes;
    Millis limit;
    std::string what;  // "global rank 0: all_reduce #3 on group tp [0, 1] (4096 bytes)"
  };

  template <class Fill, class Compute>
  void run(int32_t op, size_t bytes, Millis timeout, Fill fill, Compute compute) {
    std::lock_guard<std::mutex> lock(mu_);
    TRIPOD_CHECK(!ctl_->aborted.load(), "global rank {}: {} on group {} after the group was aborted",
                 spec_.global_rank, op_name(op), spec_.describe());
    Current cur{++seq_, op, bytes, timeout.count() > 0 ? timeout : timeout_, {}};
    cur.what = fmt::format("global rank {}: {} #{} on group {} ({} bytes)", spec_.global_rank, op_name(op), cur.seq,
                           spec_.describe(), bytes);
    auto* rec = recorder_.get();
    const uint64_t id = rec ? rec->record(spec_.name, uint64_t(cur.seq), op_name(op), bytes) : 0;
    if (rec) rec->started(id);
    const auto t0 = Clock::now();
    try {
      steps(cur, fill, compute);
      if (rec) rec->finished(id, true);
    } catch (const TimeoutError&) {
      if (rec) rec->finished(id, false);
      const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
      const std::string missing = name_missing_ranks(*store_, spec_, uint64_t(cur.seq), op_name(op), cur.limit);
      log::error("{}: timed out after {:.1f} s. {}. Recent collectives of this rank:\n{}", cur.what, waited, missing,
                 rec ? rec->dump() : std::string("(no recorder)"));
      throw TimeoutError(fmt::format("{} timed out after {:.1f} s; {}", cur.what, waited, missing),
                         "raise --distributed-timeout-minutes if a rank is legitimately slow (e.g. loading); "
                         "otherwise look at the missing ranks' output");
    } catch (...) {
      if (rec) rec->finished(id, false);
      throw;
    }
  }

  template <class Fill, class Compute>
  void steps(const Current& cur, Fill& fill, Compute& compute) {
    const int64_t s = cur.seq;
    const int slot = int(s % kSlots), prev = int((s - 1) % kSlots);
    if (s > 1) {  // 1. nobody still reads this member's mailbox
      await(cur, &MemberWords::done, s - 1, /*compare_intents=*/false);
      for (int p = 0; p < n_; ++p)
        if (p != me_) dev_->wait(peer_done_[p][prev]);
    }
    MemberWords& w = ctl_->member[me_];
    w.intent_op.store(cur.op, std::memory_order_relaxed);
    w.intent_bytes.store(int64_t(cur.bytes), std::memory_order_relaxed);
    post(&MemberWords::intent, s);
    if (cur.bytes > capacity_) grow(cur);
    fill();  // 2.
    dev_->record(ready_[slot]);
    post(&MemberWords::ready, s);
    await(cur, &MemberWords::ready, s);  // 3.
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

  // Until every peer's `word` reaches `value` (host progress only). Fails at
  // once when a peer called another op or size at this op, aborted, or died;
  // TimeoutError past the op's limit (run() names the missing members).
  // The intents are compared once this member has posted its own (steps 2
  // on), so that both sides of a mismatch see it.
  void await(const Current& cur, WordPtr word, int64_t value, bool compare_intents = true) {
    const auto deadline = Clock::now() + cur.limit;
    for (int p = 0; p < n_; ++p) {
      if (p == me_) continue;
      MemberWords& w = ctl_->member[p];
      for (;;) {
        const uint32_t bell = w.bell.load(std::memory_order_acquire);
        // Read before the intent: a peer that posted `word` for this op has
        // posted its intent too, so a mismatch is never missed.
        const bool reached = (w.*word).load(std::memory_order_acquire) >= value;
        if (compare_intents && w.intent.load(std::memory_order_acquire) == cur.seq) {
          const int32_t op = w.intent_op.load(std::memory_order_relaxed);
          const int64_t bytes = w.intent_bytes.load(std::memory_order_relaxed);
          if (op != cur.op || bytes != int64_t(cur.bytes))
            throw Error(fmt::format("{}: global rank {} called {} #{} with {} bytes where this rank called {} with {} "
                                    "bytes",
                                    cur.what, spec_.global_ranks[size_t(p)], op_name(op), cur.seq, bytes,
                                    op_name(cur.op), cur.bytes),
                        "every rank must call each collective with the same sizes; start every rank with the same "
                        "flags");
        }
        if (reached) break;
        if (ctl_->aborted.load(std::memory_order_acquire))
          throw Error(fmt::format("{}: the group was aborted (a member failed)", cur.what),
                      "look at the other ranks' output for the first error");
        if (Clock::now() >= deadline) throw TimeoutError(cur.what);
        if (const int32_t pid = w.pid.load(std::memory_order_acquire); pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH)
          throw Error(fmt::format("{}: global rank(s) [{}] of group {} exited (pid {})", cur.what,
                                  spec_.global_ranks[size_t(p)], spec_.name, pid),
                      "a peer process exited or was killed; look for the first failing rank");
        futex_wait(&w.bell, bell, std::chrono::milliseconds(50));
      }
    }
  }

  // Collective: every member grows at the same op (sizes agree). The device
  // is synchronised first, so no read of an old mailbox is still queued.
  void grow(const Current& cur) {
    dev_->synchronize();
    for (int p = 0; p < n_; ++p)
      if (p != me_ && mailboxes_[p]) {
        dev_->close(mailboxes_[p]);
        mailboxes_[p] = nullptr;
      }
    post(&MemberWords::grow_closed, generation_ + 1);
    await(cur, &MemberWords::grow_closed, generation_ + 1);
    if (mailboxes_[me_]) dev_->free(mailboxes_[me_]);
    mailboxes_[me_] = nullptr;
    constexpr size_t kMiB = size_t(1) << 20;
    capacity_ = (std::max(cur.bytes, 2 * capacity_) + kMiB - 1) / kMiB * kMiB;
    std::string handle;
    mailboxes_[me_] = dev_->alloc(capacity_, &handle);
    store_->set_str(fmt::format("grow{}/mailbox{}", generation_, me_), handle);
    for (int p = 0; p < n_; ++p)
      if (p != me_)
        mailboxes_[p] = dev_->open(store_->get_str(fmt::format("grow{}/mailbox{}", generation_, p), cur.limit));
    post(&MemberWords::grow_opened, generation_ + 1);
    await(cur, &MemberWords::grow_opened, generation_ + 1);
    dev_->forget_name(handle);
    ++generation_;
  }

  void store_barrier(const std::string& name) {
    if (store_->add(name + "/count", 1) == n_) store_->set_str(name + "/go", "1");
    store_->wait({name + "/go"}, timeout_);
  }

  size_t limit_;  // ops larger than this go to the fallback (member 0's mailbox_limit())
  GroupSpec spec_;
  std::shared_ptr<Store> store_;
  std::shared_ptr<Communicator> fallback_;
  std::shared_ptr<IpcDevice> dev_;
  Millis timeout_;
  std::shared_ptr<FlightRecorder> recorder_;
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
  std::shared_ptr<Work> completed_ = std::make_shared<DoneWork>();
};

}  // namespace

std::shared_ptr<Communicator> make_ipc_communicator(const GroupSpec& spec, std::shared_ptr<Store> store,
                                                    const CommConfig& config, std::shared_ptr<Communicator> fallback,
                                                    std::shared_ptr<IpcDevice> device) {
  if (!device || spec.global_ranks.size() > size_t(kMaxMembers) || spec.global_ranks.size() < 2) return fallback;
  auto ps = std::make_shared<PrefixStore>("ipc/", std::move(store));
  const std::string mine = device->location();
  ps->set_str(fmt::format("location{}", spec.group_rank), mine);
  if (spec.group_rank == 0) ps->set_str("limit", std::to_string(device->mailbox_limit()));
  bool shared = true;
  for (size_t r = 0; r < spec.global_ranks.size(); ++r)
    if (ps->get_str(fmt::format("location{}", r), config.timeout) != mine) shared = false;
  const size_t limit = std::stoull(ps->get_str("limit", config.timeout));
  if (!shared || mine.empty() || limit == 0) return fallback;
  return std::make_shared<IpcCommunicator>(spec, std::move(ps), config, std::move(fallback), std::move(device), limit);
}

bool is_ipc_communicator(const Communicator& comm) { return dynamic_cast<const IpcCommunicator*>(&comm) != nullptr; }

}  // namespace tripod::comm
