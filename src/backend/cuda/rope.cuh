// Rotary position embedding launcher (CUDA version of backend/cpu's
// rope.cpp; contract in backend/ops.h): in place on the NH + G query and key
// heads of qkv (B, T, (NH + 2G) * HS) of dtype dt. cos_sin: the table of
// rope_table() for (rot_dim, base) with at least T rows.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "tensor/dtype.h"

namespace tripod::backend::cuda {

// Host table of (cos, sin) per (t, i), t < T, i < rot_dim / 2: the angle
// t * base^(-2i/rot_dim) in double, cos and sin rounded to f32 (the CPU
// reference's values). Layout: cos (T, h) then sin (T, h).
std::vector<float> rope_table(int64_t T, int64_t rot_dim, float base);

// backward: the rotation by -angle (the transpose).
void rope(void* qkv, const float* cos_sin, int64_t table_rows, int64_t B, int64_t T, int NH, int G, int HS,
          int rot_dim, bool backward, DType dt, cudaStream_t stream);

}  // namespace tripod::backend::cuda
