// NcclCommunicator: the GPU communicator (one GPU per process), registered
// with DistContext for DeviceType::CUDA when this library is linked.
//
// Relates to: comm/communicator.h (contract), comm/context.h (factory
// registry, set_device_stream), comm/flight_recorder.h.
// Reference: PyTorch ProcessGroupNCCL / NCCLUtils.hpp (non-blocking
// communicators polled against a deadline, abort on timeout).
//
// NOTE [NCCL timeouts]
// NCCL has no timeout of its own. Communicators are created non-blocking
// (config.blocking = 0): init and every enqueue may return ncclInProgress,
// and we poll ncclCommGetAsyncError until the state settles. A collective's
// completion is a CUDA event on the communicator's stream; wait() polls the
// event and the async error against the op's deadline, and on expiry calls
// ncclCommAbort (which makes the stuck kernels return) and throws
// TimeoutError naming the global rank, group, op, bytes and elapsed time,
// after printing the flight recorder.
//
// Streams: each op first waits (on its own stream) for the compute stream
// given to DistContext::set_device_stream, so it sees the finished inputs;
// wait() makes the compute stream wait for the op. send/recv tags are not
// supported by NCCL: matching is by order between the two peers.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include "base/error.h"
#include "base/log.h"
#include "comm/context.h"
#include "comm/missing_ranks.h"
#include "comm/nccl/nccl_check.h"
#include "comm/transport_failure.h"

namespace tripod::comm::nccl {

void nccl_check_failed(const char* lib, int code, const std::string& text, const char* stmt,
                       const char* file, int line, const std::string& where) {
  int dev = -1;
  cudaGetDevice(&dev);
  const char* f = std::strstr(file, "src/");
  throw Error(fmt::format("{} error {} ({}) in `{}` on cuda:{}, {}", lib, code, text, stmt, dev, where),
              "", fmt::format("{}:{}", f ? f : file, line));
}

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_dtype(DType d) {
  switch (d) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::BF16: return ncclBfloat16;
    case DType::F16: return ncclFloat16;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    case DType::U8: return ncclUint8;
    default: break;
  }
  TRIPOD_FAIL("NCCL communicator: unsupported dtype {}", dtype_name(d));
}

// RAII around ncclComm_t; abort() is idempotent and safe from any thread.
class NcclComm {
 public:
  NcclComm(ncclComm_t c, std::string where) : comm_(c), where_(std::move(where)) {}
  ~NcclComm() {
    if (!comm_ || aborted_.exchange(true)) return;
    // Orderly teardown, bounded: finalize, poll, destroy; abort if stuck.
    ncclResult_t state = ncclCommFinalize(comm_);
    const auto until = Clock::now() + std::chrono::seconds(10);
    while (state == ncclInProgress && Clock::now() < until) {
      ncclCommGetAsyncError(comm_, &state);
      std::this_thread::yield();
    }
    if (state == ncclSuccess) ncclCommDestroy(comm_);
    else ncclCommAbort(comm_);
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ncclComm_t get() const { return comm_; }
  void abort() noexcept {
    if (comm_ && !aborted_.exchange(true)) ncclCommAbort(comm_);
  }
  bool aborted() const { return aborted_.load(); }
  // Polls until the communicator leaves ncclInProgress or the deadline passes.
  ncclResult_t settle(Clock::time_point deadline) {
    ncclResult_t state = ncclInProgress;
    while (true) {
      TRIPOD_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state), comm_, where_);
      if (state != ncclInProgress || Clock::now() > deadline) return state;
      std::this_thread::yield();
    }
  }

 private:
  ncclComm_t comm_;
  std::string where_;
  std::atomic<bool> aborted_{false};
};

class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<NcclComm> comm, cudaEvent_t done, Clock::time_point t0, Millis timeout,
           std::string what, std::shared_ptr<std::atomic<void*>> compute, FlightRecorder* rec,
           uint64_t id, std::function<std::string()> diagnose)
      : comm_(std::move(comm)), done_(done), t0_(t0), timeout_(timeout), what_(std::move(what)),
        compute_(std::move(compute)), rec_(rec), id_(id), diagnose_(std::move(diagnose)), in_flight_(what_) {}
  ~NcclWork() override {
    if (done_) cudaEventDestroy(done_);
  }

  bool is_completed() override { return finished_ || cudaEventQuery(done_) == cudaSuccess; }

  void wait() override {
    if (finished_) return;
    const auto deadline = t0_ + timeout_;
    for (;;) {
      cudaError_t q = cudaEventQuery(done_);
      if (q == cudaSuccess) break;
      if (q != cudaErrorNotReady) fail(fmt::format("CUDA error {}", cudaGetErrorString(q)), false);
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_->get(), &state);
      if (state != ncclSuccess && state != ncclInProgress)
        fail(fmt::format("NCCL error: {}; {}", ncclGetErrorString(state), ncclGetLastError(comm_->get())), false);
      if (comm_->aborted()) fail("the communicator was aborted", false);
      if (Clock::now() > deadline) fail("", true);
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    if (void* s = compute_->load())
      TRIPOD_NCCL_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(s), done_, 0), what_);
    if (rec_) rec_->finished(id_, true);
    in_flight_.finish();
    finished_ = true;
  }

 private:
  [[noreturn]] void fail(const std::string& why, bool timeout) {
    const double el = std::chrono::duration<double>(Clock::now() - t0_).count();
    if (rec_) rec_->finished(id_, false);
    in_flight_.finish();
    comm_->abort();  // see NOTE [NCCL timeouts]
    if (timeout) {
      const std::string missing = diagnose_ ? diagnose_() : std::string();
      log::error("{}: timed out after {:.1f} s; communicator aborted. {}. Recent collectives of this rank:\n{}",
                 what_, el, missing, rec_ ? rec_->dump() : std::string());
      throw TimeoutError(fmt::format("{} timed out after {:.1f} s (communicator aborted); {}", what_, el, missing),
                         "a member of the group never reached this collective; see the flight "
                         "recorder of each rank, or raise --distributed-timeout-minutes");
    }
    throw Error(fmt::format("{} failed after {:.1f} s: {}", what_, el, why),
                "a peer process probably exited; look for the first failing rank");
  }

  std::shared_ptr<NcclComm> comm_;
  cudaEvent_t done_ = nullptr;
  Clock::time_point t0_;
  Millis timeout_;
  std::string what_;
  std::shared_ptr<std::atomic<void*>> compute_;
  FlightRecorder* rec_;
  uint64_t id_;
  std::function<std::string()> diagnose_;
  InFlight in_flight_;  // named by the terminate handler if a thread throws meanwhile
  bool finished_ = false;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(const GroupSpec& spec, std::shared_ptr<Store> store, const CommConfig& config)
      : spec_(spec), config_(config), store_(store), where_(fmt::format("global rank {}, group {}", spec.global_rank,
                                                         spec.describe())) {
    install_transport_failure_handler();  // an exception escaping any thread: a message, not an abort
    TRIPOD_NCCL_CUDA_CHECK(cudaSetDevice(config.local_rank), where_);
    ncclUniqueId id;
    if (spec.group_rank == 0) {
      TRIPOD_NCCL_CHECK(ncclGetUniqueId(&id), nullptr, where_);
      store->set("nccl_unique_id", Bytes(id.internal, id.internal + sizeof(id.internal)));
    }
    Bytes b = store->get("nccl_unique_id", config.timeout);
    TRIPOD_CHECK(b.size() == sizeof(id.internal), "{}: bad NCCL unique id in the store", where_);
    std::memcpy(id.internal, b.data(), b.size());

    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;  // NOTE [NCCL timeouts]
    ncclComm_t c = nullptr;
    const auto t0 = Clock::now();
    TRIPOD_NCCL_CHECK(ncclCommInitRankConfig(&c, size(), id, spec.group_rank, &cfg), c, where_);
    comm_ = std::make_shared<NcclComm>(c, where_);
    const ncclResult_t state = comm_->settle(t0 + config.timeout);
    if (state == ncclInProgress) {
      comm_->abort();
      throw TimeoutError(fmt::format("{}: NCCL communicator init timed out after {:.1f} s", where_,
                                     config.timeout.count() / 1e3),
                         "a member of the group never started or is on an unreachable node "
                         "(NCCL_SOCKET_IFNAME, NCCL_DEBUG=INFO)");
    }
    TRIPOD_NCCL_CHECK(state, c, where_);
    TRIPOD_NCCL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), where_);
    TRIPOD_NCCL_CUDA_CHECK(cudaMalloc(&barrier_buf_, sizeof(float)), where_);
  }

  ~NcclCommunicator() override {
    comm_.reset();
    if (barrier_buf_) cudaFree(barrier_buf_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return spec_.group_rank; }
  int size() const override { return int(spec_.global_ranks.size()); }
  const std::string& name() const override { return spec_.name; }

  std::shared_ptr<Work> all_reduce(Tensor& t, const AllReduceOptions& o) override {
    check_device(t, "all_reduce");
    const auto op = o.op == ReduceOp::Sum ? ncclSum : ncclMax;
    return launch("all_reduce", t.nbytes(), o.timeout, [&] {
      return ncclAllReduce(t.raw(), t.raw(), size_t(t.numel()), nccl_dtype(t.dtype()), op, comm_->get(), stream_);
    });
  }
  std::shared_ptr<Work> all_gather(Tensor& out, const Tensor& in, const AllGatherOptions& o) override {
    check_device(in, "all_gather");
    check_device(out, "all_gather");
    TRIPOD_CHECK(out.nbytes() == in.nbytes() * size_t(size()) && out.dtype() == in.dtype(),
                 "all_gather on group {}: output {} must hold {} x input {}", name(), out.str(), size(), in.str());
    return launch("all_gather", out.nbytes(), o.timeout, [&] {
      return ncclAllGather(in.raw(), out.raw(), size_t(in.numel()), nccl_dtype(in.dtype()), comm_->get(), stream_);
    });
  }
  std::shared_ptr<Work> reduce_scatter(Tensor& out, const Tensor& in, const ReduceScatterOptions& o) override {
    check_device(in, "reduce_scatter");
    check_device(out, "reduce_scatter");
    TRIPOD_CHECK(in.nbytes() == out.nbytes() * size_t(size()) && out.dtype() == in.dtype(),
                 "reduce_scatter on group {}: input {} must hold {} x output {}", name(), in.str(), size(), out.str());
    const auto op = o.op == ReduceOp::Sum ? ncclSum : ncclMax;
    return launch("reduce_scatter", in.nbytes(), o.timeout, [&] {
      return ncclReduceScatter(in.raw(), out.raw(), size_t(out.numel()), nccl_dtype(in.dtype()), op,
                               comm_->get(), stream_);
    });
  }
  std::shared_ptr<Work> broadcast(Tensor& t, const BroadcastOptions& o) override {
    check_device(t, "broadcast");
    TRIPOD_CHECK(o.root >= 0 && o.root < size(), "broadcast on group {}: root {} not in [0, {})", name(), o.root, size());
    return launch("broadcast", t.nbytes(), o.timeout, [&] {
      return ncclBroadcast(t.raw(), t.raw(), size_t(t.numel()), nccl_dtype(t.dtype()), o.root, comm_->get(), stream_);
    });
  }
  std::shared_ptr<Work> send(const Tensor& t, int dst, const SendOptions& o) override {
    check_device(t, "send");
    check_peer(dst, "send");
    return launch("send", t.nbytes(), o.timeout, [&] {
      return ncclSend(t.raw(), size_t(t.numel()), nccl_dtype(t.dtype()), dst, comm_->get(), stream_);
    });
  }
  std::shared_ptr<Work> recv(Tensor& t, int src, const RecvOptions& o) override {
    check_device(t, "recv");
    check_peer(src, "recv");
    return launch("recv", t.nbytes(), o.timeout, [&] {
      return ncclRecv(t.raw(), size_t(t.numel()), nccl_dtype(t.dtype()), src, comm_->get(), stream_);
    });
  }
  // One NCCL group of a send and a receive per peer with a non-empty chunk:
  // all in flight at once. (The default's sends and receives, enqueued one
  // by one on this stream, would wait for each other across ranks once the
  // messages outgrow NCCL's buffering.) The chunk at this rank is the
  // caller's, as in the default.
  std::shared_ptr<Work> all_to_all_v(Tensor& out, const Tensor& in, const std::vector<int64_t>& send_counts,
                                     const std::vector<int64_t>& recv_counts, const AllToAllOptions& o) override {
    check_device(in, "all_to_all_v");
    check_device(out, "all_to_all_v");
    TRIPOD_CHECK(out.dtype() == in.dtype(), "all_to_all_v on group {}: out {} and in {} must have one dtype", name(),
                 out.str(), in.str());
    std::vector<int64_t> send_at, recv_at;
    all_to_all_offsets(out, in, send_counts, recv_counts, &send_at, &recv_at);
    const int n = size(), me = rank();
    const size_t es = dtype_size(in.dtype());
    const auto dt = nccl_dtype(in.dtype());
    const auto* src = static_cast<const char*>(in.raw());
    auto* dst = static_cast<char*>(out.raw());
    size_t bytes = 0;
    for (int p = 0; p < n; ++p)
      if (p != me) bytes += size_t(send_counts[size_t(p)] + recv_counts[size_t(p)]) * es;
    return launch("all_to_all_v", bytes, o.timeout, [&]() -> ncclResult_t {
      ncclResult_t r = ncclGroupStart();
      if (r != ncclSuccess && r != ncclInProgress) return r;
      for (int p = 0; p < n && (r == ncclSuccess || r == ncclInProgress); ++p) {
        if (p == me) continue;
        const size_t up = size_t(p);
        if (send_counts[up] > 0)
          r = ncclSend(src + size_t(send_at[up]) * es, size_t(send_counts[up]), dt, p, comm_->get(), stream_);
        if ((r == ncclSuccess || r == ncclInProgress) && recv_counts[up] > 0)
          r = ncclRecv(dst + size_t(recv_at[up]) * es, size_t(recv_counts[up]), dt, p, comm_->get(), stream_);
      }
      const ncclResult_t end = ncclGroupEnd();
      return r == ncclSuccess || r == ncclInProgress ? end : r;
    });
  }
  void barrier(const BarrierOptions& o) override {
    launch("barrier", 0, o.timeout, [&] {
      return ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclFloat32, ncclSum, comm_->get(), stream_);
    })->wait();
  }
  void abort() noexcept override {
    if (comm_) comm_->abort();
  }

 private:
  void check_device(const Tensor& t, const char* op) const {
    TRIPOD_CHECK(t.defined() && t.device().type == DeviceType::CUDA,
                 "{} on group {} (NCCL): tensor {} must be on the GPU", op, name(),
                 t.defined() ? t.str() : "undefined");
  }
  void check_peer(int peer, const char* op) const {
    TRIPOD_CHECK(peer >= 0 && peer < size() && peer != rank(), "{} on group {}: peer {} must be another rank in [0, {})",
                 op, name(), peer, size());
  }

  template <typename Enqueue>
  std::shared_ptr<Work> launch(const char* op, size_t bytes, Millis timeout, Enqueue enqueue) {
    TRIPOD_CHECK(!comm_->aborted(), "{}: {} after the communicator was aborted", where_, op);
    const Millis to = timeout.count() > 0 ? timeout : config_.timeout;
    const uint64_t seq = ++seq_;
    std::string what = fmt::format("global rank {}: {} #{} on group {} ({} bytes)", spec_.global_rank, op,
                                   seq, spec_.describe(), bytes);
    auto* rec = config_.recorder.get();
    const uint64_t id = rec ? rec->record(spec_.name, seq, op, bytes) : 0;
    if (rec) rec->started(id);
    const auto t0 = Clock::now();
    // Inputs are produced on the compute stream: start after it.
    if (void* s = config_.device_stream->load()) {
      cudaEvent_t ready;
      TRIPOD_NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), what);
      TRIPOD_NCCL_CUDA_CHECK(cudaEventRecord(ready, static_cast<cudaStream_t>(s)), what);
      TRIPOD_NCCL_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0), what);
      cudaEventDestroy(ready);
    } else {
      TRIPOD_NCCL_CUDA_CHECK(cudaDeviceSynchronize(), what);
    }
    TRIPOD_NCCL_CHECK(enqueue(), comm_->get(), what);
    // Non-blocking communicators may still be enqueueing: let it settle.
    const ncclResult_t state = comm_->settle(t0 + to);
    if (state == ncclInProgress) {
      comm_->abort();
      if (rec) rec->finished(id, false);
      throw TimeoutError(fmt::format("{}: enqueue timed out after {:.1f} s (communicator aborted)", what,
                                     to.count() / 1e3));
    }
    TRIPOD_NCCL_CHECK(state, comm_->get(), what);
    cudaEvent_t done;
    TRIPOD_NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), what);
    TRIPOD_NCCL_CUDA_CHECK(cudaEventRecord(done, stream_), what);
    auto diagnose = [store = store_, spec = spec_, seq, op = std::string(op), to] {
      return name_missing_ranks(*store, spec, seq, op, to);
    };
    return std::make_shared<NcclWork>(comm_, done, t0, to, std::move(what), config_.device_stream, rec, id,
                                      std::move(diagnose));
  }

  GroupSpec spec_;
  CommConfig config_;
  std::shared_ptr<Store> store_;  // the group's namespace, for naming missing ranks
  std::string where_;
  std::shared_ptr<NcclComm> comm_;
  cudaStream_t stream_ = nullptr;
  void* barrier_buf_ = nullptr;
  uint64_t seq_ = 0;
};

std::shared_ptr<Communicator> make_nccl_communicator(const GroupSpec& spec, std::shared_ptr<Store> store,
                                                     const CommConfig& config) {
  return std::make_shared<NcclCommunicator>(spec, std::move(store), config);
}

// A size-1 group's all_gather / reduce_scatter: a copy ordered after the
// compute stream's work (which produced src and may still be writing it),
// and before the work queued after it. cudaMemcpy alone runs on the legacy
// default stream, which does not wait for a non-blocking compute stream: the
// distributed optimizer's shard copies at dp 1 read gradients still being
// written. Without a published stream the device is synchronised first.
void device_copy(void* dst, const void* src, size_t nbytes, Device, void* stream) {
  if (stream) {
    TRIPOD_NCCL_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)),
                           std::string("size-1 group copy"));
  } else {
    TRIPOD_NCCL_CUDA_CHECK(cudaDeviceSynchronize(), std::string("size-1 group copy"));
    TRIPOD_NCCL_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, cudaMemcpyDefault), std::string("size-1 group copy"));
  }
}

// Linked as an object library, so this runs in every binary that links it.
const bool registered = register_comm_factory(DeviceType::CUDA, make_nccl_communicator) &&
                        register_device_copy(DeviceType::CUDA, device_copy);

}  // namespace
}  // namespace tripod::comm::nccl
