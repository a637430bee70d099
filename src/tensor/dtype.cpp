// Implementation of tensor/dtype.h.
#include "tensor/dtype.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/error.h"

namespace tripod {

size_t dtype_size(DType d) {
  switch (d) {
    case DType::F32: case DType::I32: return 4;
    case DType::F64: case DType::I64: return 8;
    case DType::BF16: case DType::F16: case DType::U16: return 2;
    case DType::U8: case DType::E4M3: case DType::E5M2: return 1;
  }
  return 0;
}

const char* dtype_name(DType d) {
  switch (d) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::U16: return "u16";
    case DType::U8: return "u8";
    case DType::E4M3: return "e4m3";
    case DType::E5M2: return "e5m2";
  }
  return "?";
}

DType dtype_from_name(const std::string& n) {
  for (DType d : {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I32, DType::I64,
                  DType::U16, DType::U8, DType::E4M3, DType::E5M2})
    if (n == dtype_name(d)) return d;
  TRIPOD_FAIL("unknown dtype '{}' (expected one of f32, f64, bf16, f16, i32, i64, u16, u8, e4m3, e5m2)", n);
}

std::string Device::str() const {
  return type == DeviceType::CPU ? std::string("cpu") : "cuda:" + std::to_string(index);
}

uint16_t f32_to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if (std::isnan(x)) return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

float bf16_to_f32(uint16_t x) {
  uint32_t u = static_cast<uint32_t>(x) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  uint32_t sign = (u >> 16) & 0x8000;
  int32_t exp = static_cast<int32_t>((u >> 23) & 0xff) - 127 + 15;
  uint32_t mant = u & 0x7fffff;
  if (((u >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00 | (mant ? 0x200 : 0));
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00);  // overflow -> inf
  if (exp <= 0) {                                               // subnormal or zero
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000;
    uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;
  return static_cast<uint16_t>(half);
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float f;
  if (exp == 0) {
    f = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -f : f;
  }
  uint32_t u = exp == 31 ? (sign | 0x7f800000 | (mant << 13))
                         : (sign | ((exp - 15 + 127) << 23) | (mant << 13));
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- FP8 ----
// The conversions work on the exact value (double holds every f32 and every
// FP8 value), so each rule reads as written in dtype.h.

namespace {

struct Fp8Format {
  int mant;         // mantissa bits
  int bias;         // exponent bias
  double max;       // largest finite value
  bool has_inf;     // E5M2: IEEE-like inf/NaN; E4M3: only S.1111.111 is NaN
};
constexpr Fp8Format kE4M3{3, 7, 448.0, false};
constexpr Fp8Format kE5M2{2, 15, 57344.0, true};

uint8_t encode_fp8(float x, const Fp8Format& f) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const int emin = 1 - f.bias;  // exponent of the smallest normal; subnormals share its quantum
  double a = std::fabs(static_cast<double>(x));
  if (std::isinf(a)) {
    a = f.max;
  } else if (a > 0) {
    int e;
    std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): the exponent of a is e - 1
    const double quantum = std::ldexp(1.0, std::max(e - 1, emin) - f.mant);
    a = std::nearbyint(a / quantum) * quantum;  // ties to even (the default rounding mode)
    a = std::min(a, f.max);                     // saturate
  }
  if (a == 0) return sign;
  int e;
  std::frexp(a, &e);
  const int exp = e - 1;
  if (exp < emin)  // subnormal: exponent field 0, a = mantissa * 2^(emin - mant)
    return static_cast<uint8_t>(sign | static_cast<int>(std::ldexp(a, f.mant - emin)));
  const int mantissa = static_cast<int>(std::ldexp(a, f.mant - exp)) - (1 << f.mant);
  return static_cast<uint8_t>(sign | ((exp + f.bias) << f.mant) | mantissa);
}

float decode_fp8(uint8_t c, const Fp8Format& f) {
  const int field = (c & 0x7f) >> f.mant, mantissa = c & ((1 << f.mant) - 1);
  const int field_max = (1 << (7 - f.mant)) - 1;
  if (f.has_inf ? field == field_max && mantissa != 0 : (c & 0x7f) == 0x7f)
    return std::numeric_limits<float>::quiet_NaN();
  double v;
  if (f.has_inf && field == field_max) v = std::numeric_limits<double>::infinity();
  else if (field == 0) v = std::ldexp(mantissa, 1 - f.bias - f.mant);
  else v = std::ldexp((1 << f.mant) + mantissa, field - f.bias - f.mant);
  return static_cast<float>(c & 0x80 ? -v : v);
}

const Fp8Format& fp8_format(DType d) {
  TRIPOD_CHECK(is_fp8(d), "expected an FP8 dtype (e4m3 or e5m2), got {}", dtype_name(d));
  return d == DType::E4M3 ? kE4M3 : kE5M2;
}

}  // namespace

uint8_t f32_to_e4m3(float x) { return encode_fp8(x, kE4M3); }
uint8_t f32_to_e5m2(float x) { return encode_fp8(x, kE5M2); }
float e4m3_to_f32(uint8_t x) { return decode_fp8(x, kE4M3); }
float e5m2_to_f32(uint8_t x) { return decode_fp8(x, kE5M2); }
uint8_t f32_to_fp8(float x, DType fp8) { return encode_fp8(x, fp8_format(fp8)); }
float fp8_to_f32(uint8_t x, DType fp8) { return decode_fp8(x, fp8_format(fp8)); }
float fp8_max(DType fp8) { return static_cast<float>(fp8_format(fp8).max); }

float fp8_block_scale(float amax, float fp8_max) {
  if (!(amax > 0.f) || std::isinf(amax)) return 1.f;  // also NaN
  float s = fp8_max / amax;
  if (std::isinf(s)) s = std::numeric_limits<float>::max();
  uint32_t bits;
  std::memcpy(&bits, &s, sizeof bits);
  bits &= 0xff800000u;  // sign and exponent: the power of two at or below s (s is normal)
  std::memcpy(&s, &bits, sizeof bits);
  return s;
}

}  // namespace tripod
