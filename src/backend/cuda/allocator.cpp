// Caching device allocator: the CUDA side of tensor/allocator.h.
//
// NOTE [Caching allocator]
// cudaMalloc/cudaFree synchronise the device and cost tens of microseconds,
// so freed blocks are kept in per-device, per-size free lists and handed out
// again. Sizes are rounded (512 B below 1 MiB, 2 MiB above) so that the
// activations of successive micro-batches hit the same buckets. Reuse is
// safe without events because all of a backend's work runs in order on one
// stream: a block freed by the host after enqueuing its last use can only be
// touched again by work enqueued later on that stream. Work on a second
// stream must synchronise with the backend's stream before freeing.
// On cudaErrorMemoryAllocation the cache is released and the call retried
// once; the error then names the bytes in use and cached.
// Blocks are never returned to the driver at exit (the driver may already be
// gone when static destructors run).
// Shared GPUs (share_device, ranks rehearsing a layout on one GPU): the
// allocator still grows on demand, but what it holds on that device (in use
// plus cached) stays under the rank's share; past it the cache is released
// first, and a request that still does not fit is an OutOfMemoryError naming
// the sharing.
#include "backend/cuda/allocator.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "base/error.h"

namespace tripod::backend::cuda {
namespace {

size_t round_size(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t(2) << 20;
  if (bytes < (size_t(1) << 20)) return (bytes + kSmall - 1) / kSmall * kSmall;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

// Restores the calling thread's current device on scope exit.
struct DeviceGuard {
  int saved = 0;
  explicit DeviceGuard(int device) {
    TRIPOD_CUDA_CHECK(cudaGetDevice(&saved));
    if (saved != device) TRIPOD_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(saved); }
};

class CachingAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes, Device device) override {
    if (bytes == 0) return nullptr;
    size_t size = round_size(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    auto& pool = pools_[device.index];
    void* p = nullptr;
    auto it = pool.free.find(size);
    if (it != pool.free.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      cached_ -= size;
    } else {
      DeviceGuard guard(device.index);
      auto cap = caps_.find(device.index);
      if (cap != caps_.end()) {
        if (in_use_ + cached_ + size > cap->second.bytes) release_locked();
        if (in_use_ + size > cap->second.bytes)
          throw OutOfMemoryError(fmt::format("CUDA out of memory on cuda:{}: {} bytes requested with {} in use, "
                                             "over this rank's share of {} bytes: {}", device.index, size, in_use_,
                                             cap->second.bytes, cap->second.why),
                                 "fewer ranks per GPU (a smaller layout to rehearse), a smaller model or "
                                 "--micro-batch-size, or --recompute-activations",
                                 size, in_use_, cap->second.bytes);
      }
      cudaError_t e = cudaMalloc(&p, size);
      if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();  // clear the sticky-free error state
        release_locked();
        e = cudaMalloc(&p, size);
      }
      if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        const std::string shared = cap == caps_.end() ? std::string() : "; " + cap->second.why;
        throw OutOfMemoryError(fmt::format("CUDA out of memory on cuda:{}: cudaMalloc of {} bytes failed with {} "
                                           "bytes in use by tripod, {} free of {}{}", device.index, size, in_use_,
                                           free_b, total_b, shared),
                               "reduce --micro-batch-size, use --recompute-activations, or a layout below",
                               size, in_use_, total_b);
      }
      if (e != cudaSuccess) {
        cudaGetLastError();
        TRIPOD_CHECK(false, "cudaMalloc of {} bytes failed on cuda:{} ({}); {} bytes in use", size, device.index,
                     cudaGetErrorString(e), in_use_);
      }
    }
    pool.size_of[p] = size;
    in_use_ += size;
    if (in_use_ > peak_) peak_ = in_use_;
    return p;
  }

  void deallocate(void* p, size_t, Device device) noexcept override {
    if (!p) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto& pool = pools_[device.index];
    auto it = pool.size_of.find(p);
    if (it == pool.size_of.end()) return;  // not ours: nothing sensible to do in noexcept
    size_t size = it->second;
    pool.size_of.erase(it);
    pool.free[size].push_back(p);
    in_use_ -= size;
    cached_ += size;
  }

  size_t bytes_in_use() const override { return in_use_; }
  size_t peak_bytes() const override { return peak_; }

  void release() {
    std::lock_guard<std::mutex> lock(mu_);
    release_locked();
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    peak_ = in_use_;
  }
  size_t share(int device, int ranks) {
    size_t free_b = 0, total_b = 0;
    {
      DeviceGuard guard(device);
      TRIPOD_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    }
    constexpr size_t kContext = size_t(1) << 30;  // CUDA context, cuBLAS workspace, ... per process
    const size_t n = size_t(std::max(ranks, 1));
    const size_t bytes = total_b > n * kContext ? (total_b - n * kContext) / n : total_b / n;
    std::lock_guard<std::mutex> lock(mu_);
    caps_[device] = Cap{bytes, fmt::format("cuda:{} is shared by {} ranks (--distributed-backend gloo), each "
                                           "capped at {:.1f} GiB", device, ranks, double(bytes) / double(1 << 30))};
    return bytes;
  }

 private:
  struct Pool {
    std::unordered_map<size_t, std::vector<void*>> free;  // rounded size -> blocks
    std::unordered_map<void*, size_t> size_of;            // blocks in use
  };
  void release_locked() {
    for (auto& [device, pool] : pools_) {
      DeviceGuard guard(device);
      TRIPOD_CUDA_CHECK(cudaDeviceSynchronize());
      for (auto& [size, blocks] : pool.free)
        for (void* b : blocks) TRIPOD_CUDA_CHECK(cudaFree(b));
      pool.free.clear();
    }
    cached_ = 0;
  }

  struct Cap {
    size_t bytes;
    std::string why;  // for OOM messages
  };
  std::mutex mu_;
  std::unordered_map<int, Pool> pools_;
  std::unordered_map<int, Cap> caps_;  // devices shared with other ranks
  size_t in_use_ = 0, peak_ = 0, cached_ = 0;
};

CachingAllocator& instance() {
  static CachingAllocator* a = [] {
    auto* p = new CachingAllocator();  // never destroyed: see NOTE
    register_allocator(DeviceType::CUDA, p);
    return p;
  }();
  return *a;
}

}  // namespace

Allocator& caching_allocator() { return instance(); }
void release_cached_blocks() { instance().release(); }
void reset_peak_bytes() { instance().reset_peak(); }
size_t share_device(int device, int ranks) { return instance().share(device, ranks); }

}  // namespace tripod::backend::cuda
