#pragma once
// Deterministic inputs and their expected results, exact in every dtype (small integers),
// for the one checked iteration per size. Every rank computes what it should receive from
// the rank numbers and element indices alone.

#include <tandem/types.hpp>

#include <cstddef>
#include <functional>

namespace tandem::tools::perf {

/// Element i of a buffer, converted to/from double (f16/bf16 through float).
double load(const BufferView& b, std::size_t i) noexcept;
void store(const BufferView& b, std::size_t i, double v) noexcept;

/// What `rank` contributes at global element `i` of a reduction with `op`, and what the
/// reduction over `world` ranks yields there. Sums stay within +-2*world and products are 2,
/// so results are exact in every dtype for up to 63 ranks.
double reduce_input(ReduceOp op, DataType t, int rank, int world, std::size_t i) noexcept;
double reduce_expected(ReduceOp op, DataType t, int world, std::size_t i) noexcept;

/// Payload of the data-movement collectives: element i sent by source `src` (a rank, or a
/// (rank, block) id for alltoall). Values 0..96.
double data_value(std::size_t src, std::size_t i) noexcept;

/// Written into outputs before the checked iteration, so untouched elements count as wrong.
inline constexpr double kSentinel = 123;

/// Fills b[i] = value(first + i).
void fill(const BufferView& b, std::size_t first, const std::function<double(std::size_t)>& value);

/// Elements i of b with b[i] != expected(first + i) (avg of floats: within rounding).
std::size_t count_wrong(const BufferView& b, std::size_t first,
                        const std::function<double(std::size_t)>& expected, bool approximate);

}  // namespace tandem::tools::perf
