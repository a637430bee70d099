// The CPU IpcDevice (comm/ipc/ipc_device.h): buffers in POSIX shared memory,
// copies and reductions done at once on the calling thread, so events are
// no-ops. The handle of a buffer is "<shm name>:<bytes>".
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>

#include <cstring>
#include <fstream>
#include <map>
#include <mutex>

#include "base/error.h"
#include "comm/context.h"
#include "comm/gloo/reduce_ops.h"
#include "comm/ipc/ipc_device.h"
#include "comm/ipc/shared_memory.h"

namespace tripod::comm {

namespace {

class CpuIpcDevice : public IpcDevice {
 public:
  // The host and its boot, the /dev/shm mount the segments live in, and the
  // pid namespace (a dead peer is found by its pid): ranks in containers
  // that share a host name but not these keep Gloo.
  std::string location() override {
    char host[256] = {0};
    ::gethostname(host, sizeof host - 1);
    std::string boot;
    std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
    struct stat shm {};
    if (::stat("/dev/shm", &shm) != 0) return "";  // no /dev/shm: no IPC
    char pidns[128] = {0};
    if (::readlink("/proc/self/ns/pid", pidns, sizeof pidns - 1) < 0) pidns[0] = '?';
    return fmt::format("cpu {} {} shm {}:{} {}", host, boot, uint64_t(shm.st_dev), uint64_t(shm.st_ino), pidns);
  }
  bool serves(const Tensor& t) const override { return t.is_cpu(); }
  // A 64th of the free space of /dev/shm (64 MiB in a default container), at
  // most 256 MiB: every group of every rank on the host has mailboxes there.
  size_t mailbox_limit() override {
    struct statvfs st {};
    if (::statvfs("/dev/shm", &st) != 0) return 0;
    const size_t free_bytes = size_t(st.f_bavail) * size_t(st.f_frsize);
    return std::min(free_bytes / 64, size_t(256) << 20);
  }

  void* alloc(size_t bytes, std::string* handle) override {
    SharedMemory m = SharedMemory::create(bytes ? bytes : 1);
    *handle = fmt::format("{}:{}", m.name(), m.size());
    void* p = m.data();
    std::lock_guard<std::mutex> lock(mu_);
    owned_.emplace(p, std::move(m));
    return p;
  }
  void free(void* p) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    owned_.erase(p);
  }
  void* open(const std::string& handle) override {
    const size_t colon = handle.rfind(':');
    TRIPOD_CHECK(colon != std::string::npos, "malformed shared-memory handle '{}'", handle);
    SharedMemory m = SharedMemory::open(handle.substr(0, colon), std::stoull(handle.substr(colon + 1)));
    void* p = m.data();
    std::lock_guard<std::mutex> lock(mu_);
    mapped_.emplace(p, std::move(m));
    return p;
  }
  void close(void* p) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    mapped_.erase(p);
  }
  void forget_name(const std::string& handle) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [p, m] : owned_)
      if (handle.rfind(m.name() + ":", 0) == 0) m.unlink();
  }

  void* event_create(std::string* handle) override {
    *handle = "cpu";
    return nullptr;
  }
  void* event_open(const std::string&) override { return nullptr; }
  void event_destroy(void*, bool) noexcept override {}
  void record(void*) override {}
  void wait(void*) override {}

  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes && dst != src) std::memcpy(dst, src, bytes);
  }
  void reduce(void* out, const std::vector<const void*>& ins, size_t count, DType dtype, ReduceOp op) override {
    TRIPOD_CHECK(!ins.empty(), "reduce over no inputs");
    const ReduceFn f = reduce_fn(dtype, op);
    if (out != ins[0]) std::memcpy(out, ins[0], count * dtype_size(dtype));
    for (size_t r = 1; r < ins.size(); ++r) f(out, out, ins[r], count);
  }
  void synchronize() override {}

 private:
  std::mutex mu_;
  std::map<void*, SharedMemory> owned_, mapped_;
};

struct Registry {
  std::mutex mu;
  std::map<DeviceType, IpcDeviceFactory> factories;
};
Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

bool register_ipc_device(DeviceType device, IpcDeviceFactory factory) {
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().factories[device] = std::move(factory);
  return true;
}

std::shared_ptr<IpcDevice> make_ipc_device(DeviceType device, const CommConfig& config) {
  if (device == DeviceType::CPU) return std::make_shared<CpuIpcDevice>();
  std::lock_guard<std::mutex> lock(registry().mu);
  auto it = registry().factories.find(device);
  if (it == registry().factories.end()) return nullptr;
  return it->second(config);
}

}  // namespace tripod::comm
