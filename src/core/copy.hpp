#pragma once
// Large copies. Above the last-level cache size a destination cannot stay cached for whoever
// reads it next, and ordinary stores first read every destination line into the cache: a
// third of the copy's memory traffic. Streaming (non-temporal) stores skip that read
// (docs/benchmarks-large.md#streaming-stores).

#include <cstddef>

namespace tandem::core {

/// Copies `bytes` from src to dst, which must not overlap. With `stream`, the destination is
/// written with non-temporal stores (after a head that aligns it), ordered before anything
/// this thread stores next (a flag a peer polls); otherwise this is std::memcpy.
void copy(void* dst, const void* src, std::size_t bytes, bool stream) noexcept;

/// True when a destination of `total` bytes (a whole message or call, not one chunk of it)
/// is better written with streaming stores: at least stream_threshold() (core/reduce.hpp).
bool streams(std::size_t total) noexcept;

}  // namespace tandem::core
