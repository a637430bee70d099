// Caching device allocator for DeviceType::CUDA (see NOTE [Caching allocator]
// in allocator.cu). Registered with tensor/allocator.h by the CUDA backend.
#pragma once

#include "tensor/allocator.h"

namespace tripod::backend::cuda {

// The process-wide caching allocator, registered on first call.
Allocator& caching_allocator();
// Return every cached (free) block to the driver; blocks in use stay.
void release_cached_blocks();
void reset_peak_bytes();

}  // namespace tripod::backend::cuda
