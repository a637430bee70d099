// Element types and devices. Pure C++: no CUDA headers here (style.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tripod {

enum class DType : uint8_t { F32, F64, BF16, F16, I32, I64, U16, U8 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);     // "f32", "bf16", ...
DType dtype_from_name(const std::string& name);  // throws Error on unknown names

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

}  // namespace tripod
