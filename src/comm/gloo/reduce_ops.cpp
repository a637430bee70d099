// Implementation of comm/gloo/reduce_ops.h.
#include "comm/gloo/reduce_ops.h"

#include <algorithm>
#include <cstdint>

#include "base/error.h"

namespace tripod::comm {

namespace {

template <typename T>
void sum_fn(void* c, const void* a, const void* b, size_t n) {
  auto* C = static_cast<T*>(c);
  auto* A = static_cast<const T*>(a);
  auto* B = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) C[i] = T(A[i] + B[i]);
}
template <typename T>
void max_fn(void* c, const void* a, const void* b, size_t n) {
  auto* C = static_cast<T*>(c);
  auto* A = static_cast<const T*>(a);
  auto* B = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) C[i] = std::max(A[i], B[i]);
}

// 16-bit floats: widen, reduce in float, round back.
template <float (*ToF)(uint16_t), uint16_t (*FromF)(float), bool Max>
void half_fn(void* c, const void* a, const void* b, size_t n) {
  auto* C = static_cast<uint16_t*>(c);
  auto* A = static_cast<const uint16_t*>(a);
  auto* B = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) {
    float x = ToF(A[i]), y = ToF(B[i]);
    C[i] = FromF(Max ? std::max(x, y) : x + y);
  }
}

}  // namespace

ReduceFn reduce_fn(DType dtype, ReduceOp op) {
  const bool mx = op == ReduceOp::Max;
  switch (dtype) {
    case DType::F32: return mx ? &max_fn<float> : &sum_fn<float>;
    case DType::F64: return mx ? &max_fn<double> : &sum_fn<double>;
    case DType::I32: return mx ? &max_fn<int32_t> : &sum_fn<int32_t>;
    case DType::I64: return mx ? &max_fn<int64_t> : &sum_fn<int64_t>;
    case DType::U8: return mx ? &max_fn<uint8_t> : &sum_fn<uint8_t>;
    case DType::BF16:
      return mx ? &half_fn<bf16_to_f32, f32_to_bf16, true> : &half_fn<bf16_to_f32, f32_to_bf16, false>;
    case DType::F16:
      return mx ? &half_fn<f16_to_f32, f32_to_f16, true> : &half_fn<f16_to_f32, f32_to_f16, false>;
    default: break;
  }
  TRIPOD_FAIL("reductions over {} tensors are not supported", dtype_name(dtype));
}

}  // namespace tripod::comm
