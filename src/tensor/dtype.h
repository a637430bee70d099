// Element types and devices. Pure C++: no CUDA headers here (style.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tripod {

// E4M3 and E5M2 are the OCP 8-bit floating-point formats (FP8 training:
// Transformer Engine, cuda_fp8.h), one byte each; see the conversions below.
enum class DType : uint8_t { F32, F64, BF16, F16, I32, I64, U16, U8, E4M3, E5M2 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);     // "f32", "bf16", ...
DType dtype_from_name(const std::string& name);  // throws Error on unknown names
inline bool is_fp8(DType d) { return d == DType::E4M3 || d == DType::E5M2; }

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<double>() { return DType::F64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::I32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::I64; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::U16; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::U8; }

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int i) { return {DeviceType::CUDA, i}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:0"
};

// bf16 <-> f32 on the host (round to nearest even), for casts and tests.
uint16_t f32_to_bf16(float x);
float bf16_to_f32(uint16_t x);
uint16_t f32_to_f16(float x);
float f16_to_f32(uint16_t x);

// FP8 <-> f32 on the host: the specification the CPU backend computes with
// and the CUDA kernels match bit for bit (tests/tensor/test_fp8_dtype.cpp).
//   E4M3: 1 sign, 4 exponent bits (bias 7), 3 mantissa bits; max 448,
//         smallest subnormal 2^-9; no infinities; NaN = S.1111.111.
//   E5M2: 1 sign, 5 exponent bits (bias 15), 2 mantissa bits; max 57344,
//         smallest subnormal 2^-16; inf = S.11111.00, NaN = S.11111.{01,10,11}.
// f32 -> FP8 (cuda_fp8.h's __nv_cvt_float_to_fp8 with __NV_SATFINITE, which
// Transformer Engine's casts use): round to nearest, ties to even; a
// magnitude that rounds past max, and +-inf, saturates to +-max; NaN gives
// 0x7f (positive NaN in both formats); a magnitude at or below half the
// smallest subnormal gives a zero of x's sign.
// FP8 -> f32 is exact; every NaN code decodes to the positive quiet NaN.
uint8_t f32_to_e4m3(float x);
uint8_t f32_to_e5m2(float x);
float e4m3_to_f32(uint8_t x);
float e5m2_to_f32(uint8_t x);
// The same for either FP8 dtype (E4M3 or E5M2; anything else throws Error).
uint8_t f32_to_fp8(float x, DType fp8);
float fp8_to_f32(uint8_t x, DType fp8);
// The largest finite value of an FP8 dtype: 448 (E4M3), 57344 (E5M2).
float fp8_max(DType fp8);
// Block scaling's scale of a block with amax `amax` (backend/ops.h
// fp8_block_cast): the power of two at or below fp8_max / amax (in f32,
// correctly rounded, then the mantissa cleared); 1 when amax is 0, inf or
// NaN; 2^127 when the quotient overflows. backend/cuda/fp8_math.cuh has the
// device twin.
float fp8_block_scale(float amax, float fp8_max);

}  // namespace tripod
