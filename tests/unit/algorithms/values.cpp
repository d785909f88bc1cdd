#include "values.hpp"

#include "support/reference.hpp"

#include <tandem/half.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace tandem::testing {

namespace {

std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::uint64_t hash3(std::uint64_t a, std::uint64_t b, std::uint64_t c) noexcept {
  return mix(mix(mix(a) ^ b) ^ c);
}

template <class T>
void store(void* base, std::size_t i, T v) {
  std::memcpy(static_cast<std::byte*>(base) + i * sizeof(T), &v, sizeof(T));
}

template <class T>
T load(const void* base, std::size_t i) {
  T v;
  std::memcpy(&v, static_cast<const std::byte*>(base) + i * sizeof(T), sizeof(T));
  return v;
}

double plain(DataType dt, std::uint64_t h) {
  return dt == DataType::u8 ? static_cast<double>(h % 32) : static_cast<double>(h % 31) - 15.0;
}

}  // namespace

double reduce_input(DataType dt, ReduceOp op, int n, int rank, std::size_t i, std::uint64_t seed) {
  const std::uint64_t h = hash3(seed, static_cast<std::uint64_t>(rank), i);
  const bool is_unsigned = dt == DataType::u8;
  switch (op) {
    case ReduceOp::sum:
      return plain(dt, h);
    case ReduceOp::avg: {
      if (!is_floating(dt)) return plain(dt, h);
      if (rank < n - 1) return static_cast<double>(h % 7) - 3.0;
      const double mean = static_cast<double>(hash3(seed, 1000, i) % 7) - 3.0;
      double others = 0;
      for (int q = 0; q < n - 1; ++q) others += reduce_input(dt, op, n, q, i, seed);
      return mean * n - others;
    }
    case ReduceOp::prod:
      if (rank < 6 && h % 4 == 0) return 2.0;
      if (is_unsigned) return 1.0;
      return ((h >> 8) & 1) != 0 ? 1.0 : -1.0;
    case ReduceOp::min:
    case ReduceOp::max:
    case ReduceOp::band:  // integers only: bit patterns of both signs
    case ReduceOp::bor:
    case ReduceOp::bxor:
      return is_unsigned ? static_cast<double>(h % 200) : static_cast<double>(h % 201) - 100.0;
  }
  return 0;
}

double reduce_reference(DataType dt, ReduceOp op, int n, std::size_t i, std::uint64_t seed) {
  return testing::reference_reduce(op, dt, n,
                                   [&](int q) { return reduce_input(dt, op, n, q, i, seed); });
}

double move_input(DataType dt, int rank, std::size_t i) {
  const auto r = static_cast<std::size_t>(rank);
  switch (dt) {
    case DataType::u8:
      return static_cast<double>((r * 37 + i) % 256);
    case DataType::i8:
      return static_cast<double>((r * 37 + i) % 256) - 128.0;
    case DataType::f16:
      return static_cast<double>((r * 397 + i) % 2048);
    case DataType::bf16:
      return static_cast<double>((r * 37 + i) % 256);
    default:
      return static_cast<double>(r * 1000003 + i);
  }
}

void put(DataType dt, void* base, std::size_t i, double v) {
  switch (dt) {
    case DataType::f32:
      return store(base, i, static_cast<float>(v));
    case DataType::f64:
      return store(base, i, v);
    case DataType::f16:
      return store(base, i, float_to_half(static_cast<float>(v)));
    case DataType::bf16:
      return store(base, i, float_to_bf16(static_cast<float>(v)));
    case DataType::i8:
      return store(base, i, static_cast<std::int8_t>(v));
    case DataType::u8:
      return store(base, i, static_cast<std::uint8_t>(v));
    case DataType::i32:
      return store(base, i, static_cast<std::int32_t>(v));
    case DataType::i64:
      return store(base, i, static_cast<std::int64_t>(v));
  }
}

double get(DataType dt, const void* base, std::size_t i) {
  switch (dt) {
    case DataType::f32:
      return load<float>(base, i);
    case DataType::f64:
      return load<double>(base, i);
    case DataType::f16:
      return half_to_float(load<std::uint16_t>(base, i));
    case DataType::bf16:
      return bf16_to_float(load<std::uint16_t>(base, i));
    case DataType::i8:
      return load<std::int8_t>(base, i);
    case DataType::u8:
      return load<std::uint8_t>(base, i);
    case DataType::i32:
      return load<std::int32_t>(base, i);
    case DataType::i64:
      return static_cast<double>(load<std::int64_t>(base, i));
  }
  return 0;
}

Buffer::Buffer(std::size_t bytes, std::byte fill)
    : storage_(bytes + 2 * kGuard, std::byte{0xa5}), bytes_(bytes) {
  std::fill(data(), data() + bytes, fill);
}

bool Buffer::guards_intact() const noexcept {
  const auto ok = [](std::byte b) { return b == std::byte{0xa5}; };
  return std::all_of(storage_.begin(), storage_.begin() + kGuard, ok) &&
         std::all_of(storage_.end() - kGuard, storage_.end(), ok);
}

std::string describe_difference(DataType dt, std::size_t i, const void* got, double want) {
  return fmt::format("element {}: got {} want {} ({})", i, get(dt, got, i), want, to_string(dt));
}

std::uint64_t hash_bytes(const void* p, std::size_t bytes) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 0x100000001b3ULL;
  return h;
}

}  // namespace tandem::testing
