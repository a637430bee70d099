// Element-wise reductions by dtype for the CPU communicator (sum, max over
// f32/f64/bf16/f16/i32/i64/u8). bf16/f16 reduce through float.
// Relates to: comm/gloo/gloo_communicator.cpp.
#pragma once

#include <cstddef>

#include "comm/communicator.h"
#include "tensor/dtype.h"

namespace tripod::comm {

// c[i] = op(a[i], b[i]) for n elements; Gloo's reduce-function signature.
using ReduceFn = void (*)(void* c, const void* a, const void* b, size_t n);

ReduceFn reduce_fn(DType dtype, ReduceOp op);  // throws Error for unsupported dtypes

}  // namespace tripod::comm
