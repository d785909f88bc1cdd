#pragma once
// Building blocks that algorithms compose (UCC style): each lives in the file of the
// collective it implements and is reused, not copied, by the others. Buffers are raw bytes;
// block layouts are element offsets (offsets[i]..offsets[i+1] is rank i's block).
// Every message carries call.tag and every wait uses call.deadline.

#include "algorithms/algorithm.hpp"

#include <cstddef>
#include <span>

namespace tandem::algorithms::detail {

/// Ring reduce-scatter (reduce_scatter/ring.cpp), chunk-pipelined. Rank r ends with block r
/// reduced (call.op as sum for avg; no division) in `mine`. `in` is read only; `work` has
/// the layout of `in` and holds partial sums of the other blocks (it may be `in` itself when
/// the caller lets the input be overwritten); `mine` may alias in/work at block r.
void ring_reduce_scatter(const Call& call, Context& ctx, DataType dt, const std::byte* in,
                         std::byte* work, std::byte* mine, std::span<const std::size_t> offsets);

/// Ring allgather (allgather/ring.cpp), chunk-pipelined. Every block ends in `out`; this
/// rank's block is taken from `mine` (copied into `out` unless it is already there).
void ring_allgather(const Call& call, Context& ctx, DataType dt, const std::byte* mine,
                    std::byte* out, std::span<const std::size_t> offsets);

/// Binomial-tree reduce toward `root` (reduce/tree.cpp), chunk-pipelined. On the root the
/// result lands in `work`; elsewhere `work` holds partial results of the subtree (may be
/// `in`). `count` elements of `dt`.
void tree_reduce(const Call& call, Context& ctx, DataType dt, const std::byte* in, std::byte* work,
                 std::size_t count, int root);

/// Binomial-tree broadcast from `root` (broadcast/tree.cpp), chunk-pipelined. The root sends
/// from `src` (and copies it into `out` unless they are the same); others receive into
/// `out`.
void tree_broadcast(const Call& call, Context& ctx, DataType dt, const std::byte* src,
                    std::byte* out, std::size_t count, int root);

/// Linear gather of each rank's block to `root` (gather/linear.cpp): the root receives
/// block i into `out` + offsets[i] (its own block is copied from `mine` unless already
/// there); every other rank sends `mine`.
void linear_gather(const Call& call, Context& ctx, DataType dt, const std::byte* mine,
                   std::byte* out, std::span<const std::size_t> offsets, int root);

}  // namespace tandem::algorithms::detail
