#pragma once
// What this process holds in memory, as Linux counts it (/proc/self/status), for the setup
// log line that says what a communicator costs per rank.

#include <cstddef>

namespace tandem::core {

/// Bytes; 0 where the kernel does not report the field.
struct ProcessMemory {
  std::size_t resident = 0;  ///< VmRSS: pages in memory, shared memory included
  std::size_t shared = 0;    ///< RssShmem: of those, shared memory (tandem's segments among them)
  std::size_t peak = 0;      ///< VmHWM: the most resident at any time
};

/// Reads /proc/self/status; all zeros where it cannot be read.
ProcessMemory process_memory() noexcept;

}  // namespace tandem::core
