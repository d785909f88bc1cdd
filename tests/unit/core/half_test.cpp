// f16 / bf16 conversions against an independent oracle: the nearest representable value found
// by searching the sorted list of every finite 16-bit value, ties to the even pattern.

#include <tandem/half.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace tandem {
namespace {

// Value of a 16-bit pattern computed from the definition (no bit tricks shared with half.cpp).
double f16_value(std::uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0x1f)
    return mant ? std::numeric_limits<double>::quiet_NaN()
                : sign * std::numeric_limits<double>::infinity();
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 25);
}

double bf16_value(std::uint16_t b) {
  const int sign = (b >> 15) ? -1 : 1;
  const int exp = (b >> 7) & 0xff;
  const int mant = b & 0x7f;
  if (exp == 0xff)
    return mant ? std::numeric_limits<double>::quiet_NaN()
                : sign * std::numeric_limits<double>::infinity();
  if (exp == 0) return sign * std::ldexp(mant, -133);
  return sign * std::ldexp(128 + mant, exp - 134);
}

// Round-to-nearest-even oracle over the non-negative finite patterns (ascending by value).
struct Oracle {
  std::vector<std::pair<double, std::uint16_t>> finite;  // value, pattern (non-negative)
  std::uint16_t inf_bits;
  explicit Oracle(double (*value)(std::uint16_t), std::uint16_t inf) : inf_bits(inf) {
    for (std::uint32_t p = 0; p < 0x8000; ++p) {
      const double v = value(static_cast<std::uint16_t>(p));
      if (std::isfinite(v)) finite.emplace_back(v, static_cast<std::uint16_t>(p));
    }
    std::sort(finite.begin(), finite.end());
  }
  std::uint16_t round(float f) const {
    const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    const double x = std::fabs(static_cast<double>(f));
    const auto& [max_v, max_p] = finite.back();
    // Past the largest finite value, the next step up (one ulp more) would be infinity.
    const double ulp = max_v - finite[finite.size() - 2].first;
    if (std::isinf(x) || x >= max_v + ulp / 2) {
      // Exactly half way rounds to even: max_p is odd in both formats, so it goes to inf.
      return static_cast<std::uint16_t>(sign | inf_bits);
    }
    auto hi = std::lower_bound(finite.begin(), finite.end(), std::make_pair(x, std::uint16_t{0}));
    if (hi == finite.end()) return static_cast<std::uint16_t>(sign | max_p);
    if (hi->first == x || hi == finite.begin())
      return static_cast<std::uint16_t>(sign | hi->second);
    const auto lo = hi - 1;
    const double dl = x - lo->first, dh = hi->first - x;
    if (dl < dh) return static_cast<std::uint16_t>(sign | lo->second);
    if (dh < dl) return static_cast<std::uint16_t>(sign | hi->second);
    return static_cast<std::uint16_t>(sign | ((lo->second & 1) ? hi->second : lo->second));
  }
};

const Oracle& f16_oracle() {
  static const Oracle o(f16_value, 0x7c00);
  return o;
}
const Oracle& bf16_oracle() {
  static const Oracle o(bf16_value, 0x7f80);
  return o;
}

bool is_nan_f16(std::uint16_t h) {
  return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
}
bool is_nan_bf16(std::uint16_t b) {
  return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0;
}

TEST(Half, EveryPatternWidensToItsValueAndRoundTrips) {
  for (std::uint32_t p = 0; p <= 0xffff; ++p) {
    const auto h = static_cast<std::uint16_t>(p);
    const float f = half_to_float(h);
    if (is_nan_f16(h)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << p;
      EXPECT_TRUE(is_nan_f16(float_to_half(f))) << std::hex << p;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), f16_value(h)) << std::hex << p;
    ASSERT_EQ(std::signbit(f), (p >> 15) != 0) << std::hex << p;
    ASSERT_EQ(float_to_half(f), h) << std::hex << p;
  }
}

TEST(BFloat16, EveryPatternWidensToItsValueAndRoundTrips) {
  for (std::uint32_t p = 0; p <= 0xffff; ++p) {
    const auto b = static_cast<std::uint16_t>(p);
    const float f = bf16_to_float(b);
    if (is_nan_bf16(b)) {
      EXPECT_TRUE(std::isnan(f));
      EXPECT_TRUE(is_nan_bf16(float_to_bf16(f))) << std::hex << p;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), bf16_value(b)) << std::hex << p;
    ASSERT_EQ(float_to_bf16(f), b) << std::hex << p;
  }
}

TEST(Half, TiesRoundToEven) {
  // Midpoints between neighbours: every normal, subnormal and the overflow boundary.
  for (std::uint32_t p = 0; p < 0x7bff; ++p) {
    const double lo = f16_value(static_cast<std::uint16_t>(p));
    const double hi = f16_value(static_cast<std::uint16_t>(p + 1));
    const auto mid = static_cast<float>((lo + hi) / 2);  // exact in float
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    const std::uint16_t even =
        (p & 1) ? static_cast<std::uint16_t>(p + 1) : static_cast<std::uint16_t>(p);
    ASSERT_EQ(float_to_half(mid), even) << "between 0x" << std::hex << p << " and 0x" << p + 1;
    ASSERT_EQ(float_to_half(-mid), even | 0x8000);
    // Just off the midpoint goes to the nearer neighbour.
    ASSERT_EQ(float_to_half(std::nextafter(mid, 0.0f)), p) << std::hex << p;
    ASSERT_EQ(float_to_half(std::nextafter(mid, 1e9f)), p + 1) << std::hex << p;
  }
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65519.99f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // tie with the odd 0x7bff goes up to inf
  EXPECT_EQ(float_to_half(-1e10f), 0xfc00);
  EXPECT_EQ(float_to_half(0x1p-25f), 0x0000);  // half the smallest subnormal: ties to 0
  EXPECT_EQ(float_to_half(0x1.8p-25f), 0x0001);
  EXPECT_EQ(float_to_half(0x1.8p-24f), 0x0002);  // 1.5 ulp: tie to even (2)
}

TEST(BFloat16, TiesRoundToEven) {
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie, even below
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie, odd below
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3f808001u)), 0x3f81);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x7f7f8000u)), 0x7f80);  // overflows to inf
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x00008000u)), 0x0000);  // subnormal tie
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x00018000u)), 0x0002);
}

TEST(Half, RandomFloatsMatchTheOracle) {
  std::mt19937 rng(2024);
  const auto& f16 = f16_oracle();
  const auto& bf16 = bf16_oracle();
  for (int i = 0; i < 300000; ++i) {
    // Random bit patterns cover every exponent; exclude NaN (checked separately).
    float f = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
    if (std::isnan(f)) continue;
    if (i % 2 == 0 && std::isfinite(f) && f != 0.0f) {
      // Rescale into and around the 16-bit formats' range (subnormal to overflow).
      int e = 0;
      const float m = std::frexp(f, &e);
      f = std::ldexp(m, static_cast<int>(rng() % 44) - 26);
    }
    ASSERT_EQ(float_to_half(f), f16.round(f)) << std::hexfloat << f;
    ASSERT_EQ(float_to_bf16(f), bf16.round(f)) << std::hexfloat << f;
  }
}

TEST(Half, NaNStaysQuietNaN) {
  const float snan = std::bit_cast<float>(0x7f800001u);
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(is_nan_f16(float_to_half(snan)));
  EXPECT_TRUE(is_nan_f16(float_to_half(qnan)));
  EXPECT_TRUE(is_nan_f16(float_to_half(-qnan)));
  EXPECT_TRUE(is_nan_bf16(float_to_bf16(snan)));
  EXPECT_TRUE(is_nan_bf16(float_to_bf16(qnan)));
  EXPECT_TRUE(is_nan_bf16(float_to_bf16(std::bit_cast<float>(0xffffffffu))));
}

}  // namespace
}  // namespace tandem
