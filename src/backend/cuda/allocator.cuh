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
// This process shares `device` with ranks - 1 others (--distributed-backend
// gloo): cap what it holds there at its share, (total - ranks x 1 GiB for
// the contexts) / ranks, so no rank's cache starves the others. Returns the
// cap in bytes. See NOTE [Caching allocator].
size_t share_device(int device, int ranks);

}  // namespace tripod::backend::cuda
