// Allocators per device type. The CPU allocator is built in (64-byte
// aligned); the CUDA backend registers its caching allocator when it starts,
// so tensor/ never includes CUDA headers.
#pragma once

#include <cstddef>

#include "tensor/dtype.h"

namespace tripod {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes, Device device) = 0;     // required; throws Error on failure
  virtual void deallocate(void* ptr, size_t bytes, Device device) noexcept = 0;  // required
  virtual size_t bytes_in_use() const { return 0; }             // optional; 0 if not tracked
  virtual size_t peak_bytes() const { return 0; }               // optional; 0 if not tracked
};

Allocator& allocator_for(DeviceType type);        // throws when none is registered
void register_allocator(DeviceType type, Allocator* allocator);  // not owned; lives for the process

}  // namespace tripod
