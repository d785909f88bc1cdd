// reduce() and divide() against a scalar reference, for every instruction set Highway built
// and this CPU runs, every dtype and op, awkward counts, misaligned views and aliasing.

#include "core/reduce.hpp"

#include "unit/core/targets.hpp"

#include <tandem/half.hpp>
#include <tandem/types.hpp>

#include <gtest/gtest.h>
#include <hwy/highway.h>
#include <hwy/targets.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace tandem::core {
namespace {

constexpr std::size_t kCounts[] = {0, 1, 2, 3, 7, 15, 16, 17, 31, 63, 64, 65, 127, 1000, 4097};
constexpr std::uint8_t kGuard = 0xA5;

enum class Alias { none, dst_is_a, dst_is_b };

// ---- independent scalar reference ------------------------------------------------------

template <class F>
F ref_float(F x, F y, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return x + y;
    case ReduceOp::prod:
      return x * y;
    case ReduceOp::min:
      if (std::isnan(x)) return x;
      if (std::isnan(y)) return y;
      return std::min(x, y);
    case ReduceOp::max:
      if (std::isnan(x)) return x;
      if (std::isnan(y)) return y;
      return std::max(x, y);
    case ReduceOp::band:  // integers only
    case ReduceOp::bor:
    case ReduceOp::bxor:
      break;
  }
  return x;
}

template <class T>
T ref_int(T x, T y, ReduceOp op) {
  using U = std::uint64_t;  // wide enough; the cast back keeps the low bits (mod 2^n)
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return static_cast<T>(static_cast<U>(x) + static_cast<U>(y));
    case ReduceOp::prod:
      return static_cast<T>(static_cast<U>(x) * static_cast<U>(y));
    case ReduceOp::min:
      return std::min(x, y);
    case ReduceOp::max:
      return std::max(x, y);
    case ReduceOp::band:
      return static_cast<T>(static_cast<U>(x) & static_cast<U>(y));
    case ReduceOp::bor:
      return static_cast<T>(static_cast<U>(x) | static_cast<U>(y));
    case ReduceOp::bxor:
      return static_cast<T>(static_cast<U>(x) ^ static_cast<U>(y));
  }
  return x;
}

template <class T>
T get(const std::byte* p, std::size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}

// Reference result of element i as raw bits (widened to u64), plus how to compare.
std::uint64_t ref_bits(DataType t, const std::byte* a, const std::byte* b, std::size_t i,
                       ReduceOp op) {
  auto bits = [](auto v) {
    std::uint64_t r = 0;
    std::memcpy(&r, &v, sizeof(v));
    return r;
  };
  switch (t) {
    case DataType::f32:
      return bits(ref_float(get<float>(a, i), get<float>(b, i), op));
    case DataType::f64:
      return bits(ref_float(get<double>(a, i), get<double>(b, i), op));
    case DataType::f16:
      return float_to_half(ref_float(half_to_float(get<std::uint16_t>(a, i)),
                                     half_to_float(get<std::uint16_t>(b, i)), op));
    case DataType::bf16:
      return float_to_bf16(ref_float(bf16_to_float(get<std::uint16_t>(a, i)),
                                     bf16_to_float(get<std::uint16_t>(b, i)), op));
    case DataType::i8:
      return bits(ref_int(get<std::int8_t>(a, i), get<std::int8_t>(b, i), op));
    case DataType::u8:
      return bits(ref_int(get<std::uint8_t>(a, i), get<std::uint8_t>(b, i), op));
    case DataType::i32:
      return bits(ref_int(get<std::int32_t>(a, i), get<std::int32_t>(b, i), op));
    case DataType::i64:
      return bits(ref_int(get<std::int64_t>(a, i), get<std::int64_t>(b, i), op));
  }
  return 0;
}

// Floating results compare by value (so that -0 == +0 whichever operand min/max picks), and
// any NaN matches any NaN; integers compare bit for bit.
bool same(DataType t, std::uint64_t want, std::uint64_t got) {
  switch (t) {
    case DataType::f32: {
      const float w = std::bit_cast<float>(static_cast<std::uint32_t>(want));
      const float g = std::bit_cast<float>(static_cast<std::uint32_t>(got));
      return (std::isnan(w) && std::isnan(g)) || w == g;
    }
    case DataType::f64: {
      const double w = std::bit_cast<double>(want);
      const double g = std::bit_cast<double>(got);
      return (std::isnan(w) && std::isnan(g)) || w == g;
    }
    case DataType::f16:
    case DataType::bf16: {
      const auto conv = t == DataType::f16 ? half_to_float : bf16_to_float;
      const float w = conv(static_cast<std::uint16_t>(want));
      const float g = conv(static_cast<std::uint16_t>(got));
      return (std::isnan(w) && std::isnan(g)) || w == g;
    }
    default:
      return want == got;
  }
}

// Random elements: full-range bits for integers; for floats mostly moderate values plus the
// special cases (zeros, subnormals, infinities, NaN, huge values that overflow 16-bit types).
void fill(DataType t, std::byte* p, std::size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> moderate(-4.0, 4.0);
  std::uniform_int_distribution<int> pick(0, 15);
  auto special = [&](int k) -> double {
    switch (k) {
      case 0:
        return 0.0;
      case 1:
        return -0.0;
      case 2:
        return std::numeric_limits<double>::infinity();
      case 3:
        return std::numeric_limits<double>::quiet_NaN();
      case 4:
        return 1e-7 * moderate(rng);  // f16 subnormal range
      case 5:
        return 70000.0 * moderate(rng);  // beyond f16
      default:
        return moderate(rng);
    }
  };
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t r = rng();
    std::byte* e = p + i * dtype_size(t);
    switch (t) {
      case DataType::f32: {
        const auto v = static_cast<float>(special(pick(rng)));
        std::memcpy(e, &v, 4);
        break;
      }
      case DataType::f64: {
        const double v = special(pick(rng));
        std::memcpy(e, &v, 8);
        break;
      }
      case DataType::f16:
      case DataType::bf16: {
        // Half of the elements: arbitrary bit patterns (every class of value).
        const float f = static_cast<float>(special(pick(rng)));
        const std::uint16_t v = (r >> 63) != 0       ? static_cast<std::uint16_t>(r)
                                : t == DataType::f16 ? float_to_half(f)
                                                     : float_to_bf16(f);
        std::memcpy(e, &v, 2);
        break;
      }
      default:
        std::memcpy(e, &r, dtype_size(t));
        break;
    }
  }
}

void check_reduce(DataType t, ReduceOp op, std::size_t count, std::size_t offset_bytes, Alias alias,
                  std::mt19937_64& rng) {
  const std::size_t es = dtype_size(t);
  const std::size_t pad = 64;
  const std::size_t span = pad + offset_bytes + count * es + pad;
  std::vector<std::byte> a(span, std::byte{kGuard}), b(span, std::byte{kGuard}),
      d(span, std::byte{kGuard});
  std::byte* pa = a.data() + pad + offset_bytes;
  std::byte* pb = b.data() + pad + offset_bytes;
  fill(t, pa, count, rng);
  fill(t, pb, count, rng);
  std::vector<std::uint64_t> want(count);
  for (std::size_t i = 0; i < count; ++i) want[i] = ref_bits(t, pa, pb, i, op);

  std::vector<std::byte>& out_buf = alias == Alias::dst_is_a ? a : alias == Alias::dst_is_b ? b : d;
  std::byte* pd = out_buf.data() + pad + offset_bytes;
  reduce(pd, pa, pb, count, t, op);

  for (std::size_t i = 0; i < count; ++i) {
    std::uint64_t got = 0;
    std::memcpy(&got, pd + i * es, es);
    ASSERT_TRUE(same(t, want[i], got))
        << to_string(t) << " " << to_string(op) << " count=" << count << " offset=" << offset_bytes
        << " alias=" << static_cast<int>(alias) << " i=" << i << std::hex << " want=0x" << want[i]
        << " got=0x" << got;
  }
  // Nothing written outside [pd, pd + count).
  for (const auto* buf : {&a, &b, &d}) {
    const bool is_out = buf == &out_buf;
    const std::size_t lo = pad + offset_bytes, hi = lo + count * es;
    for (std::size_t i = 0; i < buf->size(); ++i) {
      if (i >= lo && i < hi) continue;
      ASSERT_EQ((*buf)[i], std::byte{kGuard})
          << "byte " << i << " outside the range changed" << (is_out ? " (dst)" : " (input)");
    }
  }
}

TEST(Reduce, EveryTypeOpCountAlignmentAndAlias) {
  std::mt19937_64 rng(12345);
  for_each_target([&] {
    for (DataType t : kAllDataTypes)
      for (ReduceOp op : kAllReduceOps)
        for (std::size_t count : kCounts)
          for (std::size_t off : {std::size_t{0}, dtype_size(t)})
            for (Alias alias : {Alias::none, Alias::dst_is_a, Alias::dst_is_b}) {
              check_reduce(t, op, count, off, alias, rng);
              if (::testing::Test::HasFatalFailure()) return;
            }
  });
}

TEST(Reduce, BitwiseEveryIntegerTypeCountAlignmentAndAlias) {
  std::mt19937_64 rng(4242);
  for_each_target([&] {
    for (DataType t : kAllDataTypes) {
      if (is_floating(t)) continue;
      for (ReduceOp op : kBitwiseReduceOps)
        for (std::size_t count : kCounts)
          for (std::size_t off : {std::size_t{0}, std::size_t{1}, dtype_size(t)})
            for (Alias alias : {Alias::none, Alias::dst_is_a, Alias::dst_is_b}) {
              check_reduce(t, op, count, off, alias, rng);
              if (::testing::Test::HasFatalFailure()) return;
            }
    }
  });
}

TEST(Reduce, BitwiseOpsApplyToIntegersOnly) {
  for (DataType t : kAllDataTypes)
    for (ReduceOp op : kBitwiseReduceOps)
      EXPECT_EQ(applies_to(op, t), !is_floating(t)) << to_string(t);
  for (DataType t : kAllDataTypes)
    for (ReduceOp op : kAllReduceOps) EXPECT_TRUE(applies_to(op, t));
  for (ReduceOp op : kBitwiseReduceOps) EXPECT_EQ(parse_reduce_op(to_string(op)), op);
}

TEST(Reduce, ByteMisalignedViews) {
  std::mt19937_64 rng(777);
  for_each_target([&] {
    for (DataType t : kAllDataTypes)
      for (ReduceOp op : kAllReduceOps)
        for (std::size_t count : {std::size_t{5}, std::size_t{100}, std::size_t{1031}}) {
          check_reduce(t, op, count, 3, Alias::none, rng);
          check_reduce(t, op, count, 1, Alias::dst_is_a, rng);
          if (::testing::Test::HasFatalFailure()) return;
        }
  });
}

TEST(Reduce, F16SumRoundsEveryPatternLikeScalar) {
  // Every f16 bit pattern plus random partners: exercises the vector f16 rounding (ties,
  // subnormals, overflow to inf, NaN) against half.cpp on each instruction set.
  std::vector<std::uint16_t> a(65536), b(65536), out(65536);
  std::mt19937_64 rng(99);
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<std::uint16_t>(i);
    b[i] = static_cast<std::uint16_t>(rng());
  }
  for (DataType t : {DataType::f16, DataType::bf16}) {
    const auto widen = t == DataType::f16 ? half_to_float : bf16_to_float;
    const auto narrow = t == DataType::f16 ? float_to_half : float_to_bf16;
    for_each_target([&] {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::prod}) {
        reduce(out.data(), a.data(), b.data(), a.size(), t, op);
        for (std::size_t i = 0; i < a.size(); ++i) {
          const float x = widen(a[i]), y = widen(b[i]);
          const std::uint16_t want = narrow(op == ReduceOp::sum ? x + y : x * y);
          ASSERT_TRUE(same(t, want, out[i]))
              << to_string(t) << " " << to_string(op) << std::hex << " a=0x" << a[i] << " b=0x"
              << b[i] << " want=0x" << want << " got=0x" << out[i];
        }
      }
    });
  }
}

TEST(Reduce, IntegerSumAndProductWrap) {
  std::int32_t a[3] = {std::numeric_limits<std::int32_t>::max(), -1, 65536};
  std::int32_t b[3] = {1, std::numeric_limits<std::int32_t>::min(), 65536};
  std::int32_t s[3], p[3];
  reduce(s, a, b, 3, DataType::i32, ReduceOp::sum);
  reduce(p, a, b, 3, DataType::i32, ReduceOp::prod);
  EXPECT_EQ(s[0], std::numeric_limits<std::int32_t>::min());
  EXPECT_EQ(s[1], std::numeric_limits<std::int32_t>::max());
  EXPECT_EQ(p[2], 0);  // 2^32 mod 2^32
  std::int8_t c[2] = {100, -128}, e[2] = {100, -1}, r[2];
  reduce(r, c, e, 2, DataType::i8, ReduceOp::prod);
  EXPECT_EQ(r[0], static_cast<std::int8_t>(10000 & 0xff));
  EXPECT_EQ(r[1], -128);  // 128 wraps to -128
  std::int64_t big[2] = {std::int64_t{1} << 62, 3}, two[2] = {4, -5}, q[2];
  reduce(q, big, two, 2, DataType::i64, ReduceOp::prod);
  EXPECT_EQ(q[0], 0);
  EXPECT_EQ(q[1], -15);
}

TEST(Reduce, MinMaxPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float a[4] = {nan, 1.0f, 2.0f, -1.0f}, b[4] = {1.0f, nan, 3.0f, -2.0f}, mn[4], mx[4];
  reduce(mn, a, b, 4, DataType::f32, ReduceOp::min);
  reduce(mx, a, b, 4, DataType::f32, ReduceOp::max);
  EXPECT_TRUE(std::isnan(mn[0]) && std::isnan(mn[1]) && std::isnan(mx[0]) && std::isnan(mx[1]));
  EXPECT_EQ(mn[2], 2.0f);
  EXPECT_EQ(mx[2], 3.0f);
  EXPECT_EQ(mn[3], -2.0f);
  EXPECT_EQ(mx[3], -1.0f);
}

// ---- the scalar path for tiny counts and streaming stores for large outputs ----------------

// Counts under 8 elements and 32 bytes skip the SIMD dispatch. Their results must be the vector
// kernels' bit for bit (NaN payloads and the sign of zero included), or ranks that reduce the same
// elements in differently sized pieces would disagree.
TEST(Reduce, ScalarPathMatchesVectorKernelsBitForBit) {
  std::mt19937_64 rng(31337);
  for_each_target([&] {
    for (DataType t : kAllDataTypes) {
      const std::size_t es = dtype_size(t);
      const std::size_t n = 64 / es;  // 64 bytes: the vector kernels
      std::vector<std::byte> a(n * es), b(n * es), whole(n * es), pieces(n * es);
      for (ReduceOp op : kAllReduceOps) {
        fill(t, a.data(), n, rng);
        fill(t, b.data(), n, rng);
        reduce(whole.data(), a.data(), b.data(), n, t, op);
        for (std::size_t i = 0; i < n;) {  // pieces of 1 to 7 elements, all < 32 bytes
          const std::size_t k = std::min({n - i, 31 / es, 1 + i % 7});
          reduce(pieces.data() + i * es, a.data() + i * es, b.data() + i * es, k, t, op);
          i += k;
        }
        ASSERT_EQ(std::memcmp(whole.data(), pieces.data(), whole.size()), 0)
            << to_string(t) << " " << to_string(op);
      }
    }
  });
}

TEST(Reduce, StreamingStoresEveryTypeOpAlignmentAndAlias) {
  // A threshold of 256 bytes sends every out-of-place output from 256 bytes up through the
  // streaming loop: the head until dst is vector-aligned, streamed blocks, the tail.
  // Byte-misaligned and in-place outputs take the ordinary loop.
  const StreamThreshold small(256);
  ASSERT_EQ(stream_threshold(), 256u);
  std::mt19937_64 rng(2718);
  for_each_target([&] {
    for (DataType t : kAllDataTypes)
      for (ReduceOp op : kAllReduceOps)
        for (std::size_t count :
             {std::size_t{127}, std::size_t{128}, std::size_t{1000}, std::size_t{4099}})
          for (std::size_t off : {std::size_t{0}, dtype_size(t), 3 * dtype_size(t), std::size_t{3}})
            for (Alias alias : {Alias::none, Alias::dst_is_a}) {
              check_reduce(t, op, count, off, alias, rng);
              if (::testing::Test::HasFatalFailure()) return;
            }
  });
}

TEST(Reduce, StreamingFromTheDefaultThresholdUp) {
  // Outputs just below and above the default threshold (the last-level cache), one element
  // off vector alignment, against a scalar loop. Values are small integers in f32, so every
  // sum is exact; a guard element on each side must stay untouched.
  set_stream_threshold(0);
  const std::size_t threshold = stream_threshold();
  ASSERT_GT(threshold, 0u);
  ASSERT_LT(threshold, std::size_t{1} << 30);
  for (std::size_t count : {threshold / 4 - 1, threshold / 4 + 17}) {
    std::vector<float> a(count + 2), b(count + 2), d(count + 2, -1.0f);
    for (std::size_t i = 0; i < a.size(); ++i) {
      a[i] = static_cast<float>(i % 1021);
      b[i] = static_cast<float>(i % 977);
    }
    reduce(d.data() + 1, a.data() + 1, b.data() + 1, count, DataType::f32, ReduceOp::sum);
    std::size_t wrong = 0;
    for (std::size_t i = 1; i <= count; ++i) wrong += d[i] != a[i] + b[i] ? 1 : 0;
    EXPECT_EQ(wrong, 0u) << "count " << count;
    EXPECT_EQ(d.front(), -1.0f);
    EXPECT_EQ(d.back(), -1.0f);
    reduce(b.data() + 1, a.data() + 1, b.data() + 1, count, DataType::f32, ReduceOp::max);
    for (std::size_t i = 1; i <= count; ++i)
      wrong += b[i] != std::max(a[i], static_cast<float>(i % 977)) ? 1 : 0;
    EXPECT_EQ(wrong, 0u) << "in place, count " << count;
  }
}

TEST(Reduce, StreamThresholdRestoresItsDefault) {
  set_stream_threshold(0);
  const std::size_t def = stream_threshold();
  set_stream_threshold(SIZE_MAX);
  EXPECT_EQ(stream_threshold(), SIZE_MAX);
  set_stream_threshold(0);
  EXPECT_EQ(stream_threshold(), def);
}

// ---- divide -----------------------------------------------------------------------------

void check_divide(DataType t, std::size_t count, int divisor, std::mt19937_64& rng) {
  const std::size_t es = dtype_size(t);
  std::vector<std::byte> buf((count + 2) * es, std::byte{kGuard});
  std::byte* p = buf.data() + es;  // one element in: misaligned for the vector width
  fill(t, p, count, rng);
  const std::vector<std::byte> in(p, p + count * es);
  divide(p, count, t, divisor);
  for (std::size_t i = 0; i < count; ++i) {
    std::uint64_t want = 0, got = 0;
    std::memcpy(&got, p + i * es, es);
    auto put = [&](auto v) { std::memcpy(&want, &v, sizeof(v)); };
    const std::byte* x = in.data();
    switch (t) {
      case DataType::f32:
        put(get<float>(x, i) / static_cast<float>(divisor));
        break;
      case DataType::f64:
        put(get<double>(x, i) / divisor);
        break;
      case DataType::f16:
        put(float_to_half(half_to_float(get<std::uint16_t>(x, i)) / static_cast<float>(divisor)));
        break;
      case DataType::bf16:
        put(float_to_bf16(bf16_to_float(get<std::uint16_t>(x, i)) / static_cast<float>(divisor)));
        break;
      case DataType::i8:
        put(static_cast<std::int8_t>(get<std::int8_t>(x, i) / divisor));
        break;
      case DataType::u8:
        put(static_cast<std::uint8_t>(get<std::uint8_t>(x, i) / divisor));
        break;
      case DataType::i32:
        put(static_cast<std::int32_t>(std::int64_t{get<std::int32_t>(x, i)} / divisor));
        break;
      case DataType::i64: {
        const std::int64_t v = get<std::int64_t>(x, i);
        put(divisor == -1 ? static_cast<std::int64_t>(0 - static_cast<std::uint64_t>(v))
                          : v / divisor);
        break;
      }
    }
    ASSERT_TRUE(same(t, want, got)) << to_string(t) << " /" << divisor << " i=" << i << std::hex
                                    << " want=0x" << want << " got=0x" << got;
  }
  EXPECT_EQ(buf.front(), std::byte{kGuard});
  EXPECT_EQ(buf.back(), std::byte{kGuard});
}

TEST(Divide, EveryTypeTruncatesOrRoundsLikeScalar) {
  std::mt19937_64 rng(4242);
  for_each_target([&] {
    for (DataType t : kAllDataTypes)
      for (std::size_t count : kCounts)
        for (int divisor : {1, 2, 3, 7, 8, -3}) {
          check_divide(t, count, divisor, rng);
          if (::testing::Test::HasFatalFailure()) return;
        }
  });
}

TEST(Divide, IntegersTruncateTowardZero) {
  std::int32_t v[4] = {7, -7, 5, -5};
  divide(v, 4, DataType::i32, 2);
  EXPECT_EQ(v[0], 3);
  EXPECT_EQ(v[1], -3);
  EXPECT_EQ(v[2], 2);
  EXPECT_EQ(v[3], -2);
  std::int64_t m[1] = {std::numeric_limits<std::int64_t>::min()};
  divide(m, 1, DataType::i64, -1);  // wraps instead of trapping
  EXPECT_EQ(m[0], std::numeric_limits<std::int64_t>::min());
}

TEST(Divide, I32ExtremesTruncateLikeIntegerDivision) {
  // i32 divides in f64 on the vector path: the quotients closest to an integer, the largest
  // magnitudes and INT32_MIN / -1 (which wraps, like the sum before it) against int64 math.
  constexpr std::int32_t kMin = std::numeric_limits<std::int32_t>::min();
  constexpr std::int32_t kMax = std::numeric_limits<std::int32_t>::max();
  const std::vector<std::int32_t> values = {
      kMin, kMin + 1, kMin + 2, -2147483645, -1000003, -7,   -1,         0,
      1,    7,        1000003,  kMax - 2,    kMax - 1, kMax, 2147483645, 65536};
  for_each_target([&] {
    for (int divisor : {2, 3, -2, -3, 7, 1000003, -1000003, kMax, kMin, -1, 2147483646}) {
      std::vector<std::int32_t> v;
      for (int rep = 0; rep < 5; ++rep) v.insert(v.end(), values.begin(), values.end());
      divide(v.data(), v.size(), DataType::i32, divisor);
      for (std::size_t i = 0; i < v.size(); ++i) {
        const std::int64_t x = values[i % values.size()];
        const auto want = static_cast<std::int32_t>(x / divisor);
        ASSERT_EQ(v[i], want) << x << " / " << divisor;
      }
    }
  });
}

TEST(Divide, AverageOfHalfIsRoundedOnce) {
  // (1 + 2^-10) / 2 in f16 is exact; 3 / 2 = 1.5 exact; 1 / 3 rounds to nearest.
  std::uint16_t h[3] = {float_to_half(1.0f + 0x1p-10f), float_to_half(3.0f), float_to_half(1.0f)};
  divide(h, 3, DataType::f16, 2);
  EXPECT_EQ(half_to_float(h[0]), 0.5f + 0x1p-11f);
  EXPECT_EQ(half_to_float(h[1]), 1.5f);
  EXPECT_EQ(half_to_float(h[2]), 0.5f);
}

TEST(Reduce, KernelTargetNamesAnInstructionSet) {
  const std::string name = kernel_target();
  EXPECT_FALSE(name.empty());
  EXPECT_EQ(name, hwy::TargetName(hwy::SupportedAndGeneratedTargets().front()));
}

}  // namespace
}  // namespace tandem::core
