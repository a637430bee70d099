// What the kernel benches share: the median timing of a call and the
// pseudo-random fill (never time on zeros).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "backend/ops.h"
#include "base/timer.h"

namespace tripod::bench {

// Median over 5 repeats of `iters` calls, after 3 warm-up calls, in microseconds per call.
inline double median_us(backend::Backend& be, const std::function<void()>& fn, int iters) {
  for (int i = 0; i < 3; ++i) fn();
  be.synchronize();
  std::vector<double> t;
  for (int r = 0; r < 5; ++r) {
    Timer timer;
    for (int i = 0; i < iters; ++i) fn();
    be.synchronize();
    t.push_back(timer.seconds() * 1e6 / iters);
  }
  std::sort(t.begin(), t.end());
  return t[2];
}

// Small pseudo-random values in [-scale, scale), cast to t's dtype.
inline void fill(backend::Backend& be, Tensor& t, float scale = 0.02f) {
  Tensor h = Tensor::empty({t.numel()}, DType::F32);
  uint32_t s = 12345u + static_cast<uint32_t>(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    h.data<float>()[i] = scale * ((s >> 8) * (1.f / 16777216.f) - 0.5f) * 2.f;
  }
  Tensor d = be.empty({t.numel()}, DType::F32);
  be.copy(d, h);
  Tensor flat = t.view({t.numel()});
  if (t.dtype() == DType::F32) be.copy(flat, d);
  else be.cast(flat, d);
  be.synchronize();
}

}  // namespace tripod::bench
