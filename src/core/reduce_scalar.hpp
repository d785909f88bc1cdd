#pragma once
// Reductions of a few elements in plain C++, for reduce() to call without SIMD dispatch.
// Inline, so that reduce() itself holds the loop an 8-byte allreduce runs.

#include <tandem/half.hpp>
#include <tandem/types.hpp>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace tandem::core::scalar {

// The vector kernels would pad them through the stack, and the dispatch costs more than the
// arithmetic (an 8-byte allreduce reduces two floats). These give the same bits as the
// kernels on x86: min/max pick like MINPS/MAXPS (the second operand unless the first is
// strictly smaller/larger) after the NaN checks; bf16 rounds as the vector code does.

template <class F>
F scalar_float(F x, F y, ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return x + y;
    case ReduceOp::prod:
      return x * y;
    case ReduceOp::min:
      return std::isnan(x) ? x : std::isnan(y) ? y : x < y ? x : y;
    case ReduceOp::max:
      return std::isnan(x) ? x : std::isnan(y) ? y : x > y ? x : y;
    case ReduceOp::band:  // not for floating types (applies_to() is false): x unchanged
    case ReduceOp::bor:
    case ReduceOp::bxor:
      break;
  }
  return x;
}

template <class T>
T scalar_int(T x, T y, ReduceOp op) noexcept {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return static_cast<T>(static_cast<U>(static_cast<U>(x) + static_cast<U>(y)));
    case ReduceOp::prod: {  // in unsigned int at least: u8 operands must not promote to int
      using W = std::common_type_t<U, unsigned>;
      return static_cast<T>(
          static_cast<U>(static_cast<W>(static_cast<U>(x)) * static_cast<W>(static_cast<U>(y))));
    }
    case ReduceOp::min:
      return x < y ? x : y;
    case ReduceOp::max:
      return x > y ? x : y;
    case ReduceOp::band:
      return static_cast<T>(x & y);
    case ReduceOp::bor:
      return static_cast<T>(x | y);
    case ReduceOp::bxor:
      return static_cast<T>(x ^ y);
  }
  return x;
}

// Elements go through memcpy: views need not be aligned to their element size.
template <class T, class Fn>
void scalar_loop(void* dst, const void* a, const void* b, std::size_t n, Fn fn) noexcept {
  auto* d = static_cast<std::byte*>(dst);
  const auto* x = static_cast<const std::byte*>(a);
  const auto* y = static_cast<const std::byte*>(b);
  for (std::size_t i = 0; i < n * sizeof(T); i += sizeof(T)) {
    T u, v;
    std::memcpy(&u, x + i, sizeof(T));
    std::memcpy(&v, y + i, sizeof(T));
    const T r = fn(u, v);
    std::memcpy(d + i, &r, sizeof(T));
  }
}

inline void reduce_scalar(void* dst, const void* a, const void* b, std::size_t n, DataType dtype,
                          ReduceOp op) noexcept {
  switch (dtype) {
    case DataType::f32:
      return scalar_loop<float>(dst, a, b, n,
                                [op](float x, float y) { return scalar_float(x, y, op); });
    case DataType::f64:
      return scalar_loop<double>(dst, a, b, n,
                                 [op](double x, double y) { return scalar_float(x, y, op); });
    case DataType::f16:  // not taken (see reduce()); correct all the same
      return scalar_loop<std::uint16_t>(dst, a, b, n, [op](std::uint16_t x, std::uint16_t y) {
        return float_to_half(scalar_float(half_to_float(x), half_to_float(y), op));
      });
    case DataType::bf16:  // half.cpp's conversions, inline: calls would cost more than the sum
      return scalar_loop<std::uint16_t>(dst, a, b, n, [op](std::uint16_t x, std::uint16_t y) {
        const float f = scalar_float(std::bit_cast<float>(std::uint32_t{x} << 16),
                                     std::bit_cast<float>(std::uint32_t{y} << 16), op);
        const auto r = std::bit_cast<std::uint32_t>(f);
        if (std::isnan(f)) return static_cast<std::uint16_t>((r >> 16) | 0x40u);
        return static_cast<std::uint16_t>((r + 0x7fffu + ((r >> 16) & 1u)) >> 16);
      });
    case DataType::i8:
      return scalar_loop<std::int8_t>(
          dst, a, b, n, [op](std::int8_t x, std::int8_t y) { return scalar_int(x, y, op); });
    case DataType::u8:
      return scalar_loop<std::uint8_t>(
          dst, a, b, n, [op](std::uint8_t x, std::uint8_t y) { return scalar_int(x, y, op); });
    case DataType::i32:
      return scalar_loop<std::int32_t>(
          dst, a, b, n, [op](std::int32_t x, std::int32_t y) { return scalar_int(x, y, op); });
    case DataType::i64:
      return scalar_loop<std::int64_t>(
          dst, a, b, n, [op](std::int64_t x, std::int64_t y) { return scalar_int(x, y, op); });
  }
}

}  // namespace tandem::core::scalar
