#include "pattern.hpp"

#include <tandem/half.hpp>

#include <cmath>
#include <cstdint>

namespace tandem::tools::perf {
namespace {

bool is_unsigned(DataType t) noexcept {
  return t == DataType::u8;
}

template <class T>
T* as(const BufferView& b) noexcept {
  return static_cast<T*>(b.data);
}

}  // namespace

double load(const BufferView& b, std::size_t i) noexcept {
  switch (b.dtype) {
    case DataType::f32:
      return as<float>(b)[i];
    case DataType::f64:
      return as<double>(b)[i];
    case DataType::f16:
      return half_to_float(as<std::uint16_t>(b)[i]);
    case DataType::bf16:
      return bf16_to_float(as<std::uint16_t>(b)[i]);
    case DataType::i8:
      return as<std::int8_t>(b)[i];
    case DataType::u8:
      return as<std::uint8_t>(b)[i];
    case DataType::i32:
      return as<std::int32_t>(b)[i];
    case DataType::i64:
      return static_cast<double>(as<std::int64_t>(b)[i]);
  }
  return NAN;
}

void store(const BufferView& b, std::size_t i, double v) noexcept {
  switch (b.dtype) {
    case DataType::f32:
      as<float>(b)[i] = static_cast<float>(v);
      return;
    case DataType::f64:
      as<double>(b)[i] = v;
      return;
    case DataType::f16:
      as<std::uint16_t>(b)[i] = float_to_half(static_cast<float>(v));
      return;
    case DataType::bf16:
      as<std::uint16_t>(b)[i] = float_to_bf16(static_cast<float>(v));
      return;
    case DataType::i8:
      as<std::int8_t>(b)[i] = static_cast<std::int8_t>(v);
      return;
    case DataType::u8:
      as<std::uint8_t>(b)[i] = static_cast<std::uint8_t>(v);
      return;
    case DataType::i32:
      as<std::int32_t>(b)[i] = static_cast<std::int32_t>(v);
      return;
    case DataType::i64:
      as<std::int64_t>(b)[i] = static_cast<std::int64_t>(v);
      return;
  }
}

double reduce_input(ReduceOp op, DataType t, int rank, int world, std::size_t i) noexcept {
  const auto r = static_cast<std::size_t>(rank);
  const auto n = static_cast<std::size_t>(world);
  const bool u = is_unsigned(t);
  switch (op) {
    case ReduceOp::sum:
      return u ? static_cast<double>((r + i) % 3) : static_cast<double>((r + i) % 5) - 2;
    case ReduceOp::prod:
      return r == i % n ? 2 : 1;
    case ReduceOp::min:
    case ReduceOp::max:
    case ReduceOp::band:  // integers only
    case ReduceOp::bor:
    case ReduceOp::bxor:
      return static_cast<double>((r * 7 + i * 3) % 11) - (u ? 0 : 5);
    case ReduceOp::avg: {
      // base + d(rank) with d summing to zero over the ranks: the sum is world * base, so
      // the average is exact whatever the division does.
      const double base = u ? static_cast<double>(i % 3) + 1 : static_cast<double>(i % 5) - 2;
      double d = (r % 2 == 0) ? 1 : -1;
      if (n % 2 == 1 && r == n - 1) d = 0;
      return base + d;
    }
  }
  return 0;
}

double reduce_expected(ReduceOp op, DataType t, int world, std::size_t i) noexcept {
  if (op == ReduceOp::avg)
    return is_unsigned(t) ? static_cast<double>(i % 3) + 1 : static_cast<double>(i % 5) - 2;
  if (op == ReduceOp::prod) return 2;
  double acc = reduce_input(op, t, 0, world, i);
  for (int r = 1; r < world; ++r) {
    const double v = reduce_input(op, t, r, world, i);
    switch (op) {
      case ReduceOp::sum:
        acc += v;
        break;
      case ReduceOp::min:
        acc = std::min(acc, v);
        break;
      case ReduceOp::max:
        acc = std::max(acc, v);
        break;
      case ReduceOp::band:
        acc = static_cast<double>(static_cast<std::int64_t>(acc) & static_cast<std::int64_t>(v));
        break;
      case ReduceOp::bor:
        acc = static_cast<double>(static_cast<std::int64_t>(acc) | static_cast<std::int64_t>(v));
        break;
      case ReduceOp::bxor:
        acc = static_cast<double>(static_cast<std::int64_t>(acc) ^ static_cast<std::int64_t>(v));
        break;
      default:
        break;
    }
  }
  return acc;
}

double data_value(std::size_t src, std::size_t i) noexcept {
  return static_cast<double>((src * 31 + i * 7 + 1) % 97);
}

void fill(const BufferView& b, std::size_t first, const std::function<double(std::size_t)>& value) {
  for (std::size_t i = 0; i < b.count; ++i) store(b, i, value(first + i));
}

std::size_t count_wrong(const BufferView& b, std::size_t first,
                        const std::function<double(std::size_t)>& expected, bool approximate) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < b.count; ++i) {
    const double got = load(b, i);
    const double want = expected(first + i);
    const bool ok =
        approximate ? std::fabs(got - want) <= 1e-6 * std::max(1.0, std::fabs(want)) : got == want;
    if (!ok) ++wrong;
  }
  return wrong;
}

}  // namespace tandem::tools::perf
