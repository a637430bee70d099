// The CUDA IpcDevice (comm/ipc/ipc_device.h; its kernel in cuda_ipc_reduce.cu), for ranks that share one GPU
// (a cluster layout rehearsed on one GPU with --distributed-backend gloo and
// TRIPOD_IPC_COLLECTIVES=1): mailboxes are cudaMalloc blocks the peers map
// with cudaIpcOpenMemHandle, events are interprocess events, and the copies
// and the reduction kernel run on the backend's compute stream
// (DistContext::set_device_stream; the legacy stream when none was set).
// The host never waits for the GPU except in synchronize() (a mailbox
// growing, and at the end). Registered for DeviceType::CUDA when linked.
#include <cuda_runtime.h>

#include <atomic>
#include <cstring>

#include "base/error.h"
#include "comm/context.h"
#include "comm/cuda_staging/cuda_comm_check.h"
#include "comm/cuda_staging/cuda_ipc_reduce.h"
#include "comm/ipc/ipc_device.h"

namespace tripod::comm::cuda_ipc {
namespace {

void check(cudaError_t e, const char* what) { check_cuda(e, "IPC collective", what); }

template <class H>
std::string to_bytes(const H& h) {
  return std::string(reinterpret_cast<const char*>(&h), sizeof h);
}
template <class H>
H from_bytes(const std::string& s) {
  TRIPOD_CHECK(s.size() == sizeof(H), "malformed CUDA IPC handle ({} bytes, expected {})", s.size(), sizeof(H));
  H h;
  std::memcpy(&h, s.data(), sizeof h);
  return h;
}

class CudaIpcDevice : public IpcDevice {
 public:
  explicit CudaIpcDevice(std::shared_ptr<std::atomic<void*>> stream) : stream_(std::move(stream)) {}

  std::string location() override {
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
    std::string uuid;
    for (char c : prop.uuid.bytes) uuid += fmt::format("{:02x}", uint8_t(c));
    return "cuda " + uuid;
  }
  bool serves(const Tensor& t) const override { return t.device().type == DeviceType::CUDA; }
  // Mailboxes are device memory outside the caching allocator's cap: 256 MiB
  // per group at most (a larger op takes the staged path).
  size_t mailbox_limit() override { return size_t(256) << 20; }

  void* alloc(size_t bytes, std::string* handle) override {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes), "cudaMalloc (IPC mailbox)");
    cudaIpcMemHandle_t h;
    check(cudaIpcGetMemHandle(&h, p), "cudaIpcGetMemHandle");
    *handle = to_bytes(h);
    return p;
  }
  void free(void* p) noexcept override { cudaFree(p); }
  void* open(const std::string& handle) override {
    void* p = nullptr;
    check(cudaIpcOpenMemHandle(&p, from_bytes<cudaIpcMemHandle_t>(handle), cudaIpcMemLazyEnablePeerAccess),
          "cudaIpcOpenMemHandle (a peer's mailbox)");
    return p;
  }
  void close(void* p) noexcept override { cudaIpcCloseMemHandle(p); }

  void* event_create(std::string* handle) override {
    cudaEvent_t e = nullptr;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventInterprocess), "cudaEventCreate (interprocess)");
    cudaIpcEventHandle_t h;
    check(cudaIpcGetEventHandle(&h, e), "cudaIpcGetEventHandle");
    *handle = to_bytes(h);
    return e;
  }
  void* event_open(const std::string& handle) override {
    cudaEvent_t e = nullptr;
    check(cudaIpcOpenEventHandle(&e, from_bytes<cudaIpcEventHandle_t>(handle)), "cudaIpcOpenEventHandle");
    return e;
  }
  void event_destroy(void* e, bool) noexcept override {
    if (e) cudaEventDestroy(static_cast<cudaEvent_t>(e));
  }
  void record(void* e) override { check(cudaEventRecord(static_cast<cudaEvent_t>(e), stream()), "cudaEventRecord"); }
  void wait(void* e) override {
    check(cudaStreamWaitEvent(stream(), static_cast<cudaEvent_t>(e), 0), "cudaStreamWaitEvent (a peer's event)");
  }

  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes && dst != src)
      check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()), "cudaMemcpyAsync (IPC)");
  }
  void reduce(void* out, const std::vector<const void*>& ins, size_t count, DType dtype, ReduceOp op) override {
    TRIPOD_CHECK(!ins.empty() && ins.size() <= size_t(kMaxInputs), "IPC reduction over {} inputs", ins.size());
    if (count == 0) return;
    Inputs in{};
    in.n = int(ins.size());
    for (size_t r = 0; r < ins.size(); ++r) in.p[r] = ins[r];
    ReduceType type;
    switch (dtype) {
      case DType::F32: type = ReduceType::F32; break;
      case DType::F64: type = ReduceType::F64; break;
      case DType::BF16: type = ReduceType::BF16; break;
      case DType::F16: type = ReduceType::F16; break;
      case DType::I32: type = ReduceType::I32; break;
      case DType::I64: type = ReduceType::I64; break;
      case DType::U8: type = ReduceType::U8; break;
      default: TRIPOD_FAIL("IPC collective: cannot reduce {} tensors", dtype_name(dtype));
    }
    check(cuda_ipc::reduce(out, in, count, type, op == ReduceOp::Max, stream()), "reduction kernel launch");
  }
  void synchronize() override { check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize"); }

 private:
  cudaStream_t stream() const { return static_cast<cudaStream_t>(stream_->load()); }
  std::shared_ptr<std::atomic<void*>> stream_;
};

// Linked as an object library, so this runs in every binary that links it.
const bool registered = register_ipc_device(DeviceType::CUDA, [](const CommConfig& c) {
  return std::make_shared<CudaIpcDevice>(c.device_stream);
});

}  // namespace
}  // namespace tripod::comm::cuda_ipc
