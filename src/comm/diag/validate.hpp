#pragma once
// Argument checks, run on the calling thread before a call touches any peer, and the shape
// (count, dtype) that identifies a call in its fingerprint and in messages.

#include "algorithms/algorithm.hpp"

#include <tandem/types.hpp>

#include <cstddef>

namespace tandem::comm {

/// Throws Error(InvalidArgument) naming the collective and the bad value.
void validate(const algorithms::Call& call, int rank, int size);

/// The element count every rank passes identically: allreduce/reduce/allgather/gather/
/// alltoall/send: in.count; broadcast/scatter/reduce_scatter/recv: out.count; allgatherv:
/// the total; barrier: 0.
std::size_t shape_count(const algorithms::Call& call) noexcept;
/// The dtype of the buffer shape_count() counts.
DataType shape_dtype(const algorithms::Call& call) noexcept;

}  // namespace tandem::comm
