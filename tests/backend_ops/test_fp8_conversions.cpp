// The FP8 conversions of tensor/dtype.h, which the FP8 ops of the CPU
// reference compute with (and the CUDA kernels match bit for bit): every
// code of both formats against its value written by hand, round trips,
// ties to even between every pair of neighbours, saturation, NaN, and
// values at and below half the smallest subnormal, and block scaling's
// scale (fp8_block_scale) on values worked by hand. (The same encoder agrees
// with cuda_fp8.h's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...) on all
// 2^32 floats; that check needs the CUDA headers and a few CPU-minutes, so
// it is not part of the suite.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "tensor/dtype.h"

namespace tripod {
namespace {

struct Format {
  DType dt;
  int exp_bits, mant_bits, bias;
  float max, min_subnormal;
};
const Format kFormats[] = {{DType::E4M3, 4, 3, 7, 448.f, 0x1p-9f}, {DType::E5M2, 5, 2, 15, 57344.f, 0x1p-16f}};

// A code's value from the OCP FP8 definition, written out independently of dtype.cpp.
double hand_value(uint8_t c, const Format& f) {
  const int sign = c >> 7, e = (c >> f.mant_bits) & ((1 << f.exp_bits) - 1), m = c & ((1 << f.mant_bits) - 1);
  const int e_all_ones = (1 << f.exp_bits) - 1;
  if (f.dt == DType::E4M3 && e == e_all_ones && m == 7) return std::numeric_limits<double>::quiet_NaN();
  if (f.dt == DType::E5M2 && e == e_all_ones)
    return m ? std::numeric_limits<double>::quiet_NaN() : (sign ? -1 : 1) * std::numeric_limits<double>::infinity();
  const double frac = static_cast<double>(m) / (1 << f.mant_bits);
  const double mag = e == 0 ? frac * std::pow(2.0, 1 - f.bias) : (1 + frac) * std::pow(2.0, e - f.bias);
  return sign ? -mag : mag;
}

bool is_nan_code(uint8_t c, const Format& f) { return std::isnan(hand_value(c, f)); }

TEST(Fp8Conversions, EveryCodeDecodesToItsValue) {
  for (const Format& f : kFormats)
    for (int c = 0; c < 256; ++c) {
      const double want = hand_value(static_cast<uint8_t>(c), f);
      const float got = fp8_to_f32(static_cast<uint8_t>(c), f.dt);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << dtype_name(f.dt) << " code " << c;
        EXPECT_FALSE(std::signbit(got)) << dtype_name(f.dt) << " code " << c << ": NaN decodes positive";
      } else {
        EXPECT_EQ(static_cast<double>(got), want) << dtype_name(f.dt) << " code " << c;
        EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << dtype_name(f.dt) << " code " << c;
      }
    }
  // A few values by name.
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.f);
  EXPECT_EQ(e4m3_to_f32(0x38), 1.f);
  EXPECT_EQ(e4m3_to_f32(0x01), 0x1p-9f);
  EXPECT_EQ(e4m3_to_f32(0x08), 0x1p-6f);
  EXPECT_EQ(e4m3_to_f32(0xfe), -448.f);
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7f)) && std::isnan(e4m3_to_f32(0xff)));
  EXPECT_EQ(e5m2_to_f32(0x7b), 57344.f);
  EXPECT_EQ(e5m2_to_f32(0x3c), 1.f);
  EXPECT_EQ(e5m2_to_f32(0x01), 0x1p-16f);
  EXPECT_EQ(e5m2_to_f32(0x7c), std::numeric_limits<float>::infinity());
  EXPECT_EQ(e5m2_to_f32(0xfc), -std::numeric_limits<float>::infinity());
  for (uint8_t c : {0x7d, 0x7e, 0x7f, 0xfd, 0xfe, 0xff}) EXPECT_TRUE(std::isnan(e5m2_to_f32(c))) << int(c);
  EXPECT_EQ(fp8_max(DType::E4M3), 448.f);
  EXPECT_EQ(fp8_max(DType::E5M2), 57344.f);
}

TEST(Fp8Conversions, EveryCodeRoundTrips) {
  for (const Format& f : kFormats)
    for (int c = 0; c < 256; ++c) {
      const uint8_t code = static_cast<uint8_t>(c);
      const float v = fp8_to_f32(code, f.dt);
      if (is_nan_code(code, f)) EXPECT_EQ(f32_to_fp8(v, f.dt), 0x7f) << dtype_name(f.dt) << " code " << c;
      else if (std::isinf(v))  // E5M2's inf codes: saturation gives +-max
        EXPECT_EQ(f32_to_fp8(v, f.dt), (c & 0x80) | 0x7b) << dtype_name(f.dt) << " code " << c;
      else EXPECT_EQ(f32_to_fp8(v, f.dt), code) << dtype_name(f.dt) << " code " << c;
    }
}

// Between every two neighbouring finite codes of one sign: the midpoint goes
// to the code with the even mantissa, a hair either side to the nearer one.
TEST(Fp8Conversions, TiesGoToEven) {
  for (const Format& f : kFormats)
    for (uint8_t sign : {uint8_t(0x00), uint8_t(0x80)})
      for (int c = 0; c < 0x7f; ++c) {
        const uint8_t lo = static_cast<uint8_t>(sign | c), hi = static_cast<uint8_t>(sign | (c + 1));
        const float a = fp8_to_f32(lo, f.dt), b = fp8_to_f32(hi, f.dt);
        if (!std::isfinite(a) || !std::isfinite(b)) continue;
        const float mid = (a + b) / 2;  // exact: fp8 neighbours have few bits
        const uint8_t even = (lo & 1) == 0 ? lo : hi;
        EXPECT_EQ(f32_to_fp8(mid, f.dt), even) << dtype_name(f.dt) << " between " << a << " and " << b;
        EXPECT_EQ(f32_to_fp8(std::nextafter(mid, a), f.dt), lo) << dtype_name(f.dt) << " just below " << mid;
        EXPECT_EQ(f32_to_fp8(std::nextafter(mid, b), f.dt), hi) << dtype_name(f.dt) << " just above " << mid;
      }
  // Hand-picked ties: E4M3 1 + 1/16 -> 1 (0x38), 1 + 3/16 -> 1.25 (0x3a); 3 * 2^-10 -> 2^-8 (0x02).
  EXPECT_EQ(f32_to_e4m3(1.0625f), 0x38);
  EXPECT_EQ(f32_to_e4m3(1.1875f), 0x3a);
  EXPECT_EQ(f32_to_e4m3(0x3p-10f), 0x02);
  EXPECT_EQ(f32_to_e5m2(1.125f), 0x3c);   // 1 + 1/8 ties to 1 (mantissa 00)
  EXPECT_EQ(f32_to_e5m2(1.375f), 0x3e);   // 1 + 3/8 ties to 1.5 (mantissa 10)
}

// Past max, and +-inf, saturate to +-max (__NV_SATFINITE); NaN of either sign gives 0x7f.
TEST(Fp8Conversions, SaturatesAndKeepsNaN) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const Format& f : kFormats) {
    const uint8_t max = f32_to_fp8(f.max, f.dt);
    EXPECT_EQ(fp8_to_f32(max, f.dt), f.max);
    for (float x : {inf, 1e30f, std::numeric_limits<float>::max(), f.max * 1.0001f, f.max * 2, f.max * 1.125f}) {
      EXPECT_EQ(f32_to_fp8(x, f.dt), max) << dtype_name(f.dt) << " " << x;
      EXPECT_EQ(f32_to_fp8(-x, f.dt), max | 0x80) << dtype_name(f.dt) << " " << -x;
    }
    EXPECT_EQ(f32_to_fp8(nan, f.dt), 0x7f);
    EXPECT_EQ(f32_to_fp8(-nan, f.dt), 0x7f);
  }
  // The top ties: 464 lies halfway between 448 and the NaN code's 480 (E4M3), 61440 between 57344 and
  // inf's 65536 (E5M2): E4M3 ties to even 448; E5M2's even neighbour is inf, which saturates to max.
  EXPECT_EQ(f32_to_e4m3(464.f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(464.0001f), 0x7e);
  EXPECT_EQ(f32_to_e5m2(61440.f), 0x7b);
  EXPECT_EQ(f32_to_e5m2(61439.f), 0x7b);
}

// At or below half the smallest subnormal: a zero of x's sign; just above: the smallest subnormal.
TEST(Fp8Conversions, BelowTheSmallestSubnormal) {
  for (const Format& f : kFormats) {
    const float half = f.min_subnormal / 2;
    for (float x : {half, half / 2, 1e-30f, std::numeric_limits<float>::denorm_min(), 0.f}) {
      EXPECT_EQ(f32_to_fp8(x, f.dt), 0x00) << dtype_name(f.dt) << " " << x;
      EXPECT_EQ(f32_to_fp8(-x, f.dt), 0x80) << dtype_name(f.dt) << " " << -x;
    }
    EXPECT_EQ(f32_to_fp8(std::nextafter(half, 1.f), f.dt), 0x01) << dtype_name(f.dt);
    EXPECT_EQ(f32_to_fp8(-std::nextafter(half, 1.f), f.dt), 0x81) << dtype_name(f.dt);
    EXPECT_EQ(f32_to_fp8(f.min_subnormal, f.dt), 0x01) << dtype_name(f.dt);
    EXPECT_EQ(f32_to_fp8(1.5f * f.min_subnormal, f.dt), 0x02) << dtype_name(f.dt);  // tie -> even
  }
}

// The sign is a mirror: -x encodes as x with the sign bit (NaN aside).
TEST(Fp8Conversions, SignIsAMirror) {
  for (const Format& f : kFormats)
    for (float x = 1e-7f; x < 1e6f; x *= 1.0137f)
      EXPECT_EQ(f32_to_fp8(-x, f.dt), f32_to_fp8(x, f.dt) | 0x80) << dtype_name(f.dt) << " " << x;
}

// Block scaling's scale: the power of two at or below fp8_max / amax.
TEST(Fp8Conversions, BlockScaleIsThePowerOfTwoAtOrBelow) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(fp8_block_scale(3.5f, 448.f), 128.f);      // 448 / 3.5 = 128 exactly
  EXPECT_EQ(fp8_block_scale(5.f, 448.f), 64.f);        // 89.6
  EXPECT_EQ(fp8_block_scale(448.f, 448.f), 1.f);
  EXPECT_EQ(fp8_block_scale(447.f, 448.f), 1.f);       // 1.0022
  EXPECT_EQ(fp8_block_scale(449.f, 448.f), 0.5f);      // 0.9978
  EXPECT_EQ(fp8_block_scale(7.f, 57344.f), 8192.f);    // exact
  EXPECT_EQ(fp8_block_scale(std::nextafter(7.f, 8.f), 57344.f), 4096.f);  // just below 8192
  EXPECT_EQ(fp8_block_scale(1e-3f, 448.f), 262144.f);  // 448000 -> 2^18
  // One ulp either side of 448: a quotient just below 1 (scale 1/2) or just above (scale 1).
  EXPECT_EQ(fp8_block_scale(std::nextafter(448.f, 449.f), 448.f), 0.5f);
  EXPECT_EQ(fp8_block_scale(std::nextafter(448.f, 447.f), 448.f), 1.f);
  // No usable amax: 1.
  for (float a : {0.f, -0.f, inf, nan}) EXPECT_EQ(fp8_block_scale(a, 448.f), 1.f) << a;
  // Overflowing quotients (a subnormal amax) take FLT_MAX's power of two; FLT_MAX's amax the smallest.
  EXPECT_EQ(fp8_block_scale(std::numeric_limits<float>::denorm_min(), 448.f), 0x1p127f);
  EXPECT_EQ(fp8_block_scale(1e-40f, 57344.f), 0x1p127f);
  EXPECT_EQ(fp8_block_scale(std::numeric_limits<float>::max(), 448.f), 0x1p-120f);  // 1.3e-36
  EXPECT_EQ(fp8_block_scale(std::numeric_limits<float>::max(), 57344.f), 0x1p-113f);
}

TEST(Fp8Conversions, DTypeNamesAndSizes) {
  EXPECT_EQ(dtype_from_name("e4m3"), DType::E4M3);
  EXPECT_EQ(dtype_from_name("e5m2"), DType::E5M2);
  EXPECT_EQ(dtype_size(DType::E4M3), 1u);
  EXPECT_EQ(dtype_size(DType::E5M2), 1u);
  EXPECT_TRUE(is_fp8(DType::E4M3) && is_fp8(DType::E5M2) && !is_fp8(DType::U8) && !is_fp8(DType::BF16));
}

}  // namespace
}  // namespace tripod
