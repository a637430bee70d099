// Implementation of comm/gloo/gloo_communicator.h. See NOTE [Gloo async].
#include "comm/gloo/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "base/error.h"
#include "base/log.h"
#include "comm/gloo/reduce_ops.h"
#include "comm/missing_ranks.h"
#include "comm/transport_failure.h"

namespace tripod::comm {

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint8_t kReduceScatterSlot = 0x70;  // gloo's own prefixes are small
constexpr uint8_t kP2PSlot = 0x71;
constexpr size_t kBcubeMaxBytes = 256 << 10;

// Gloo's rendezvous reads and writes through our Store.
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(std::shared_ptr<comm::Store> s, Millis t) : s_(std::move(s)), t_(t) {}
  void set(const std::string& key, const std::vector<char>& data) override { s_->set(key, data); }
  std::vector<char> get(const std::string& key) override { return s_->get(key, t_); }
  void wait(const std::vector<std::string>& keys) override { s_->wait(keys, t_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& t) override {
    s_->wait(keys, t.count() > 0 ? Millis(t.count()) : t_);
  }

 private:
  std::shared_ptr<comm::Store> s_;
  Millis t_;
};

template <typename F>
void with_element_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::F32: f(float{}); return;
    case DType::F64: f(double{}); return;
    case DType::I32: f(int32_t{}); return;
    case DType::I64: f(int64_t{}); return;
    case DType::BF16:
    case DType::F16:
    case DType::U16: f(uint16_t{}); return;
    case DType::U8:
    case DType::E4M3:
    case DType::E5M2: f(uint8_t{}); return;
  }
  TRIPOD_FAIL("unsupported dtype {}", dtype_name(dtype));
}

// The state the worker thread shares with the communicator (the thread
// may outlive the communicator if it is stuck in Gloo at shutdown).
struct Shared {
  GroupSpec spec;
  CommConfig config;
  std::shared_ptr<Store> store;
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  bool stop = false, busy = false, aborted = false;
  uint64_t seq = 0;  // collectives issued on this group
};

class GlooWork : public Work {
 public:
  GlooWork(std::string what, Millis timeout, size_t ahead)
      : what_(std::move(what)), timeout_(timeout),
        safety_deadline_(Clock::now() + timeout * (ahead + 1) + Millis{10000}) {}

  void wait() override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_until(lock, safety_deadline_, [&] { return done_; }))
      throw TimeoutError(fmt::format("{}: never completed (worker thread stuck past its timeout)", what_));
    if (error_) std::rethrow_exception(error_);
  }
  bool is_completed() override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  void finish(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      error_ = std::move(e);
    }
    cv_.notify_all();
  }

 private:
  std::string what_;
  Millis timeout_;
  Clock::time_point safety_deadline_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(const GroupSpec& spec, std::shared_ptr<Store> store, const CommConfig& config)
      : sh_(std::make_shared<Shared>()) {
    install_transport_failure_handler();  // Gloo's event-loop thread may throw
    sh_->spec = spec;
    sh_->config = config;
    sh_->store = store;
    gloo::transport::tcp::attr attr;
    attr.hostname = config.local_addr.empty() ? "127.0.0.1" : config.local_addr;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(spec.group_rank, int(spec.global_ranks.size()));
    ctx->setTimeout(config.timeout);
    GlooStoreAdapter adapter(store, config.timeout);
    try {
      ctx->connectFullMesh(adapter, device);
    } catch (const TimeoutError& e) {
      throw TimeoutError(fmt::format("global rank {}: connecting group {} timed out: {}",
                                     spec.global_rank, spec.describe(), e.message()),
                         "a member of the group never started or crashed before this point");
    } catch (const gloo::Exception& e) {
      TRIPOD_FAIL("global rank {}: connecting group {} failed: {}", spec.global_rank,
                  spec.describe(), e.what());
    }
    sh_->ctx = ctx;
    std::shared_ptr<Shared> sh = sh_;
    std::thread([sh] { worker(sh); }).detach();
  }

  ~GlooCommunicator() override {
    std::lock_guard<std::mutex> lock(sh_->mu);
    sh_->stop = true;
    sh_->cv.notify_all();
  }

  int rank() const override { return sh_->spec.group_rank; }
  int size() const override { return int(sh_->spec.global_ranks.size()); }
  const std::string& name() const override { return sh_->spec.name; }

  std::shared_ptr<Work> all_reduce(Tensor& t, const AllReduceOptions& o) override {
    check_host(t, "all_reduce");
    ReduceFn fn = reduce_fn(t.dtype(), o.op);
    return enqueue("all_reduce", t.nbytes(), o.timeout, [t, fn](Shared& sh, uint64_t seq, Millis to) {
      gloo::AllreduceOptions ao(sh.ctx);
      with_element_type(t.dtype(), [&](auto x) {
        using T = decltype(x);
        ao.setOutput(static_cast<T*>(t.raw()), size_t(t.numel()));
      });
      ao.setReduceFunction(fn);
      // Small messages are latency bound: bcube takes log2(n) steps where the
      // ring takes 2(n-1), which matters most with many ranks per core. Gloo's
      // bcube honours only the context's timeout, so a per-op timeout keeps the ring.
      if (t.nbytes() <= kBcubeMaxBytes && to == sh.config.timeout)
        ao.setAlgorithm(gloo::AllreduceOptions::Algorithm::BCUBE);
      ao.setTag(uint32_t(seq));
      ao.setTimeout(to);
      gloo::allreduce(ao);
    });
  }

  std::shared_ptr<Work> all_gather(Tensor& out, const Tensor& in, const AllGatherOptions& o) override {
    check_host(in, "all_gather");
    check_host(out, "all_gather");
    TRIPOD_CHECK(out.nbytes() == in.nbytes() * size_t(size()) && out.dtype() == in.dtype(),
                 "all_gather on group {}: output {} must hold {} x input {}", name(), out.str(),
                 size(), in.str());
    return enqueue("all_gather", out.nbytes(), o.timeout, [out, in](Shared& sh, uint64_t seq, Millis to) {
      gloo::AllgatherOptions ao(sh.ctx);
      ao.setInput(static_cast<uint8_t*>(in.raw()), in.nbytes());
      ao.setOutput(static_cast<uint8_t*>(out.raw()), out.nbytes());
      ao.setTag(uint32_t(seq));
      ao.setTimeout(to);
      gloo::allgather(ao);
    });
  }

  std::shared_ptr<Work> reduce_scatter(Tensor& out, const Tensor& in,
                                       const ReduceScatterOptions& o) override {
    check_host(in, "reduce_scatter");
    check_host(out, "reduce_scatter");
    TRIPOD_CHECK(in.nbytes() == out.nbytes() * size_t(size()) && out.dtype() == in.dtype(),
                 "reduce_scatter on group {}: input {} must hold {} x output {}", name(), in.str(),
                 size(), out.str());
    ReduceFn fn = reduce_fn(in.dtype(), o.op);
    return enqueue("reduce_scatter", in.nbytes(), o.timeout, [out, in, fn](Shared& sh, uint64_t seq, Millis to) {
      ring_reduce_scatter(sh, out, in, fn, seq, to);
    });
  }

  std::shared_ptr<Work> broadcast(Tensor& t, const BroadcastOptions& o) override {
    check_host(t, "broadcast");
    TRIPOD_CHECK(o.root >= 0 && o.root < size(), "broadcast on group {}: root {} not in [0, {})",
                 name(), o.root, size());
    const int root = o.root;
    return enqueue("broadcast", t.nbytes(), o.timeout, [t, root](Shared& sh, uint64_t seq, Millis to) {
      gloo::BroadcastOptions bo(sh.ctx);
      bo.setOutput(static_cast<uint8_t*>(t.raw()), t.nbytes());
      bo.setRoot(root);
      bo.setTag(uint32_t(seq));
      bo.setTimeout(to);
      gloo::broadcast(bo);
    });
  }

  void barrier(const BarrierOptions& o) override {
    enqueue("barrier", 0, o.timeout, [](Shared& sh, uint64_t seq, Millis to) {
      gloo::BarrierOptions bo(sh.ctx);
      bo.setTag(uint32_t(seq));
      bo.setTimeout(to);
      gloo::barrier(bo);
    })->wait();
  }

  std::shared_ptr<Work> send(const Tensor& t, int dst, const SendOptions& o) override {
    return p2p(true, const_cast<Tensor&>(t), dst, o.tag, o.timeout);
  }
  std::shared_ptr<Work> recv(Tensor& t, int src, const RecvOptions& o) override {
    return p2p(false, t, src, o.tag, o.timeout);
  }

  void abort() noexcept override {
    std::deque<std::function<void()>> dropped;
    {
      std::lock_guard<std::mutex> lock(sh_->mu);
      if (sh_->aborted) return;
      sh_->aborted = true;
      dropped.swap(sh_->queue);
    }
    for (auto& f : dropped) f();  // each finishes its Work with the abort error
    try {
      sh_->ctx->closeConnections();  // a running collective fails at once
    } catch (...) {
    }
  }

 private:
  void check_host(const Tensor& t, const char* op) const {
    TRIPOD_CHECK(t.defined() && t.is_cpu(), "{} on group {} (Gloo): tensor {} must be on the host",
                 op, name(), t.defined() ? t.str() : "undefined");
  }

  Millis timeout_of(Millis t) const { return t.count() > 0 ? t : sh_->config.timeout; }

  std::string describe(const char* op, uint64_t seq, size_t bytes) const {
    return fmt::format("global rank {}: {} #{} on group {} ({} bytes)", sh_->spec.global_rank, op,
                       seq, sh_->spec.describe(), bytes);
  }

  using Body = std::function<void(Shared&, uint64_t, Millis)>;

  std::shared_ptr<Work> enqueue(const char* op, size_t bytes, Millis timeout, Body body) {
    const Millis to = timeout_of(timeout);
    std::lock_guard<std::mutex> lock(sh_->mu);
    TRIPOD_CHECK(!sh_->aborted, "global rank {}: {} on group {} after the group was aborted",
                 sh_->spec.global_rank, op, sh_->spec.describe());
    const uint64_t seq = ++sh_->seq;
    auto work = std::make_shared<GlooWork>(describe(op, seq, bytes), to, sh_->queue.size());
    auto* rec = sh_->config.recorder.get();
    const uint64_t id = rec ? rec->record(sh_->spec.name, seq, op, bytes) : 0;
    Shared* sh = sh_.get();
    const std::string what = describe(op, seq, bytes);
    const std::string op_name = op;
    sh_->queue.push_back([sh, work, body = std::move(body), seq, to, id, rec, what, op_name] {
      if (sh->aborted) {
        if (rec) rec->finished(id, false);
        work->finish(std::make_exception_ptr(Error(what + ": the group was aborted")));
        return;
      }
      if (rec) rec->started(id);
      const auto t0 = Clock::now();
      auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
      InFlight in_flight(what);
      try {
        body(*sh, seq, to);
        if (rec) rec->finished(id, true);
        work->finish(nullptr);
      } catch (const std::exception& e) {
        if (rec) rec->finished(id, false);
        const std::string msg = e.what();
        const bool timed_out = msg.find("Timed out") != std::string::npos ||
                               dynamic_cast<const TimeoutError*>(&e) != nullptr;
        if (timed_out) {
          const double waited = elapsed();
          const std::string missing = name_missing_ranks(*sh->store, sh->spec, seq, op_name, to);
          log::error("{}: timed out after {:.1f} s. {}. Recent collectives of this rank:\n{}", what,
                     waited, missing, rec ? rec->dump() : std::string("(no recorder)"));
          work->finish(std::make_exception_ptr(TimeoutError(
              fmt::format("{} timed out after {:.1f} s; {}", what, waited, missing),
              "raise --distributed-timeout-minutes if a rank is legitimately slow (e.g. loading); "
              "otherwise look at the missing ranks' output")));
        } else {
          const bool sizes = explain_transport_error(msg) != msg;
          const double failed_after = elapsed();
          // A peer that closed or reset its connection: name the ranks that
          // do not report the failure themselves (the dead ones).
          std::string dead;
          if (!sh->aborted && !sizes &&
              (msg.find("Connection") != std::string::npos || msg.find("Read error") != std::string::npos))
            dead = "; " + name_dead_ranks(*sh->store, sh->spec, Millis{2000}, [sh] {
                     try {
                       sh->ctx->closeConnections();  // members waiting on this rank fail now, not at the timeout
                     } catch (...) {
                     }
                   });
          work->finish(std::make_exception_ptr(Error(fmt::format(
              "{} failed after {:.1f} s: {}{}", what, failed_after,
              sh->aborted ? "the group was aborted" : explain_transport_error(msg), dead),
              sizes ? "every rank must call each collective with the same sizes; start every rank with "
                      "the same flags"
                    : "a peer process probably exited or was killed; look for the first failing rank")));
        }
      } catch (...) {
        if (rec) rec->finished(id, false);
        work->finish(std::make_exception_ptr(Error(what + ": failed with an exception of unknown type")));
      }
    });
    sh_->cv.notify_all();
    return work;
  }

  static void worker(std::shared_ptr<Shared> sh) {
    std::unique_lock<std::mutex> lock(sh->mu);
    for (;;) {
      sh->cv.wait(lock, [&] { return sh->stop || !sh->queue.empty(); });
      if (sh->queue.empty()) return;  // stop requested and nothing left
      auto fn = std::move(sh->queue.front());
      sh->queue.pop_front();
      sh->busy = true;
      lock.unlock();
      fn();
      lock.lock();
      sh->busy = false;
    }
  }

  // Ring reduce-scatter over unbound buffers: N-1 steps; at step s rank r
  // sends its partial chunk (r-s-1) mod N to r+1 and adds the partial chunk
  // (r-s-2) mod N received from r-1. After the last step chunk r is final.
  static void ring_reduce_scatter(Shared& sh, Tensor out, Tensor in, ReduceFn fn, uint64_t seq,
                                  Millis to) {
    const int n = int(sh.spec.global_ranks.size()), r = sh.spec.group_rank;
    const size_t chunk = out.nbytes();  // bytes per rank
    const size_t elems = size_t(out.numel());
    if (chunk == 0) return;
    std::vector<char> acc(static_cast<const char*>(in.raw()), static_cast<const char*>(in.raw()) + in.nbytes());
    std::vector<char> tmp(chunk);
    auto acc_buf = sh.ctx->createUnboundBuffer(acc.data(), acc.size());
    auto tmp_buf = sh.ctx->createUnboundBuffer(tmp.data(), tmp.size());
    const uint64_t slot = gloo::Slot::build(kReduceScatterSlot, uint32_t(seq));
    const auto deadline = Clock::now() + to;
    auto left = [&] {
      return std::max(Millis{1}, std::chrono::duration_cast<Millis>(deadline - Clock::now()));
    };
    for (int s = 0; s < n - 1; ++s) {
      const int c_send = ((r - s - 1) % n + n) % n, c_recv = ((r - s - 2) % n + n) % n;
      tmp_buf->recv((r - 1 + n) % n, slot);
      acc_buf->send((r + 1) % n, slot, size_t(c_send) * chunk, chunk);
      tmp_buf->waitRecv(left());
      acc_buf->waitSend(left());
      char* dst = acc.data() + size_t(c_recv) * chunk;
      fn(dst, dst, tmp.data(), elems);
    }
    std::memcpy(out.raw(), acc.data() + size_t(r) * chunk, chunk);
  }

  class P2PWork : public Work {
   public:
    P2PWork(std::unique_ptr<gloo::transport::UnboundBuffer> buf, bool is_send, Millis to,
            std::string what, FlightRecorder* rec, uint64_t id)
        : buf_(std::move(buf)), send_(is_send), to_(to), what_(std::move(what)), rec_(rec), id_(id),
          in_flight_(what_) {}
    void wait() override {
      if (done_) return;
      const auto t0 = Clock::now();
      try {
        if (send_) buf_->waitSend(to_);
        else buf_->waitRecv(to_);
      } catch (const std::exception& e) {
        if (rec_) rec_->finished(id_, false);
        const double el = std::chrono::duration<double>(Clock::now() - t0).count();
        std::string msg = e.what();
        if (msg.find("Timed out") != std::string::npos) {
          log::error("{}: timed out after {:.1f} s. Recent collectives of this rank:\n{}", what_, el,
                     rec_ ? rec_->dump() : std::string());
          throw TimeoutError(fmt::format("{} timed out after {:.1f} s (the peer never posted the "
                                         "matching {})", what_, el, send_ ? "recv" : "send"));
        }
        in_flight_.finish();
        throw Error(fmt::format("{} failed after {:.1f} s: {}", what_, el, explain_transport_error(msg)),
                    "the peer process probably exited, or the two ranks disagree on the size; look for "
                    "the first failing rank");
      }
      if (rec_) rec_->finished(id_, true);
      in_flight_.finish();
      done_ = true;
    }
    bool is_completed() override { return done_; }

   private:
    std::unique_ptr<gloo::transport::UnboundBuffer> buf_;
    bool send_;
    Millis to_;
    std::string what_;
    FlightRecorder* rec_;
    uint64_t id_;
    InFlight in_flight_;
    bool done_ = false;
  };

  std::shared_ptr<Work> p2p(bool is_send, Tensor& t, int peer, int tag, Millis timeout) {
    const char* op = is_send ? "send" : "recv";
    check_host(t, op);
    TRIPOD_CHECK(peer >= 0 && peer < size() && peer != rank(),
                 "{} on group {}: peer {} must be another rank in [0, {})", op, name(), peer, size());
    TRIPOD_CHECK(!sh_->aborted, "{} on aborted group {}", op, name());
    auto* rec = sh_->config.recorder.get();
    const uint64_t id = rec ? rec->record(name(), 0, op, t.nbytes()) : 0;
    if (rec) rec->started(id);
    auto buf = sh_->ctx->createUnboundBuffer(t.raw(), t.nbytes());
    const uint64_t slot = gloo::Slot::build(kP2PSlot, uint32_t(tag));
    if (is_send) buf->send(peer, slot);
    else buf->recv(peer, slot);
    const std::string what =
        fmt::format("global rank {}: {} {} global rank {} (tag {}) on group {} ({} bytes)",
                    sh_->spec.global_rank, op, is_send ? "to" : "from", sh_->spec.global_ranks[peer],
                    tag, sh_->spec.describe(), t.nbytes());
    return std::make_shared<P2PWork>(std::move(buf), is_send, timeout_of(timeout), what, rec, id);
  }

  std::shared_ptr<Shared> sh_;
};

}  // namespace

std::shared_ptr<Communicator> make_gloo_communicator(const GroupSpec& spec, std::shared_ptr<Store> store,
                                                     const CommConfig& config) {
  return std::make_shared<GlooCommunicator>(spec, std::move(store), config);
}

}  // namespace tripod::comm
