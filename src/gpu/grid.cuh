#pragma once
// The launch shape of tandem's elementwise kernels: 256 threads a block, grid-stride loops,
// at most 4096 blocks (the loops cover the rest).

#include <cstddef>

namespace tandem::gpu::grid {

inline constexpr int kThreads = 256;
inline constexpr unsigned kMaxBlocks = 4096;

/// Blocks for `count` work items (at least one).
inline unsigned blocks_for(std::size_t count) {
  const std::size_t b = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b == 0 ? 1 : (b < kMaxBlocks ? b : kMaxBlocks));
}

}  // namespace tandem::gpu::grid
