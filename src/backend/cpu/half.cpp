// Implementation of backend/cpu/half.h.
#include "backend/cpu/half.h"

#include "base/error.h"

namespace tripod::backend::cpu {

void widen_to_f32(Tensor& dst, const Tensor& src) {
  float* d = dst.data<float>();
  const uint16_t* s = src.data_u16();
  const int64_t n = src.numel();
  if (src.dtype() == DType::BF16) {
    for (int64_t i = 0; i < n; ++i) d[i] = bf16_to_f32(s[i]);
  } else {
    TRIPOD_CHECK(src.dtype() == DType::F16, "widen_to_f32: {} is not bf16 or f16", src.str());
    for (int64_t i = 0; i < n; ++i) d[i] = f16_to_f32(s[i]);
  }
}

void round_from_f32(Tensor& dst, const Tensor& src) {
  uint16_t* d = dst.data_u16();
  const float* s = src.data<float>();
  const int64_t n = src.numel();
  if (dst.dtype() == DType::BF16) {
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(s[i]);
  } else {
    TRIPOD_CHECK(dst.dtype() == DType::F16, "round_from_f32: {} is not bf16 or f16", dst.str());
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(s[i]);
  }
}

const Tensor& Widened::in(const Tensor& t) {
  if (!is_half(t.dtype())) return t;
  Tensor& w = copies_.emplace_back(Tensor::empty(t.shape(), DType::F32));
  widen_to_f32(w, t);
  return w;
}

Tensor& Widened::out(Tensor& t) {
  if (!is_half(t.dtype())) return t;
  Tensor& w = copies_.emplace_back(Tensor::empty(t.shape(), DType::F32));
  widen_to_f32(w, t);
  outs_.emplace_back(t, &w);
  return w;
}

Widened::~Widened() {
  for (auto& [original, wide] : outs_) round_from_f32(original, *wide);
}

}  // namespace tripod::backend::cpu
