#pragma once
// Inputs and independent references for the algorithm tests. Inputs are small integers
// chosen so that every result is exact in every dtype, whatever the reduction order:
//  - sum: |x| <= 15 (u8: 0..31), so sums over <= 8 ranks stay exact even in bf16;
//  - avg: integers for integer dtypes (truncating division); for floating dtypes the last
//    rank's value makes the sum a multiple of the world size, so the mean is exact;
//  - prod: +-1 and a few 2s (only ranks < 6 contribute 2s): |prod| <= 64;
//  - min/max: |x| <= 100 (u8: 0..199).
// Data-movement collectives use values that encode (rank, index), so misplaced blocks show.

#include <tandem/types.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::testing {

/// Input element `i` of `rank` for a reduction with `op` over `n` ranks (see above).
double reduce_input(DataType dt, ReduceOp op, int n, int rank, std::size_t i, std::uint64_t seed);

/// The reduction of reduce_input over all ranks at element i, computed in double/int64.
double reduce_reference(DataType dt, ReduceOp op, int n, std::size_t i, std::uint64_t seed);

/// Element `i` of `rank`'s data for collectives that only move data (exact in `dt`).
double move_input(DataType dt, int rank, std::size_t i);

/// Writes v (an exactly representable integer) as element i of a `dt` buffer.
void put(DataType dt, void* base, std::size_t i, double v);
/// Reads element i of a `dt` buffer.
double get(DataType dt, const void* base, std::size_t i);

/// A byte buffer with guard zones before and after, for overrun detection.
class Buffer {
 public:
  explicit Buffer(std::size_t bytes, std::byte fill = std::byte{0x5a});
  std::byte* data() noexcept { return storage_.data() + kGuard; }
  std::size_t bytes() const noexcept { return bytes_; }
  /// True when both guard zones still hold their pattern.
  bool guards_intact() const noexcept;

 private:
  static constexpr std::size_t kGuard = 64;
  std::vector<std::byte> storage_;
  std::size_t bytes_;
};

/// "" when the `count` elements at `got` equal `expected(i)` bit for bit, else a description
/// of the first difference.
template <class F>
std::string compare(DataType dt, const void* got, std::size_t count, F expected);

std::string describe_difference(DataType dt, std::size_t i, const void* got, double want);

template <class F>
std::string compare(DataType dt, const void* got, std::size_t count, F expected) {
  const std::size_t es = dtype_size(dt);
  std::byte want[8];
  for (std::size_t i = 0; i < count; ++i) {
    const double w = expected(i);
    put(dt, want, 0, w);
    const auto* g = static_cast<const std::byte*>(got) + i * es;
    for (std::size_t b = 0; b < es; ++b)
      if (g[b] != want[b]) return describe_difference(dt, i, got, w);
  }
  return {};
}

/// FNV-1a of a byte range (to compare outputs across ranks).
std::uint64_t hash_bytes(const void* p, std::size_t bytes) noexcept;

}  // namespace tandem::testing
