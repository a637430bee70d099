// Implementation of tensor/allocator.h: the host allocator tracks bytes in
// use and the peak, reported as mem_peak_bytes on CPU runs.
#include "tensor/allocator.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "base/error.h"

namespace tripod {
namespace {

class HostAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes, Device) override {
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
