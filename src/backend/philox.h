// Counter-based random numbers shared by the CPU and CUDA backends, so a
// dropout mask is a pure function of (seed, element index) on any device and
// any layout, and is recomputed in backward instead of stored.
// Header-only so both compilers see the same code; TRIPOD_HD marks it
// host+device under nvcc.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TRIPOD_HD __host__ __device__ __forceinline__
#else
#define TRIPOD_HD inline
#endif

namespace tripod::backend {

// splitmix64 finaliser of (seed, counter): a strong 64-bit mix.
TRIPOD_HD uint64_t mix64(uint64_t seed, uint64_t counter) {
  uint64_t x = seed ^ (counter * 0x9e3779b97f4a7c15ull);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) with 24 bits of resolution (exact in f32).
TRIPOD_HD float uniform01(uint64_t seed, uint64_t counter) {
  return static_cast<float>(mix64(seed, counter) >> 40) * (1.0f / 16777216.0f);
}

}  // namespace tripod::backend
