// Implementation of tensor/allocator.h: the host allocator tracks bytes in
// use and the peak, reported as mem_peak_bytes on CPU runs.
#include "tensor/allocator.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "base/debug_config.h"
#include "base/error.h"

namespace tripod {
namespace {

// TRIPOD_CPU_MEMORY_LIMIT_MB: the CPU run behaves as a device of that much
// memory (an allocation past it raises OutOfMemoryError, as cudaMalloc
// would), so a layout planned for a GPU's memory can be rehearsed on CPU.
size_t cpu_memory_limit() {
  return static_cast<size_t>(debug_config().cpu_memory_limit_mb) << 20;
}

class HostAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes, Device) override {
    if (const size_t limit = cpu_memory_limit(); limit && in_use_.load() + bytes > limit)
      throw OutOfMemoryError(fmt::format("out of memory: an allocation of {} bytes with {} bytes in use exceeds "
                                         "TRIPOD_CPU_MEMORY_LIMIT_MB ({} bytes)", bytes, in_use_.load(), limit),
                             "see the layouts suggested below, or raise the limit", bytes, in_use_.load(), limit);
    size_t rounded = (bytes + 63) / 64 * 64;
    void* p = rounded ? std::aligned_alloc(64, rounded) : nullptr;
    TRIPOD_CHECK_HINT(p || rounded == 0, "reduce the model or batch size",
                      "host allocation of {} bytes failed ({} bytes already in use)", bytes,
                      in_use_.load());
    size_t now = in_use_.fetch_add(bytes) + bytes;
    size_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {}
    return p;
  }
  void deallocate(void* p, size_t bytes, Device) noexcept override {
    std::free(p);
    in_use_.fetch_sub(bytes);
  }
  size_t bytes_in_use() const override { return in_use_.load(); }
  size_t peak_bytes() const override { return peak_.load(); }

 private:
  std::atomic<size_t> in_use_{0}, peak_{0};
};

HostAllocator g_host;
Allocator* g_cuda = nullptr;

}  // namespace

Allocator& allocator_for(DeviceType type) {
  if (type == DeviceType::CPU) return g_host;
  TRIPOD_CHECK(g_cuda, "no CUDA allocator registered: this build or run has no CUDA backend");
  return *g_cuda;
}

void register_allocator(DeviceType type, Allocator* allocator) {
  TRIPOD_CHECK(type == DeviceType::CUDA, "only the CUDA allocator can be registered");
  g_cuda = allocator;
}

}  // namespace tripod
