#pragma once
// tandem-topo --measure: bandwidth between the CPU sets of local ranks (two pinned threads
// passing data through a shared ring buffer, as ranks do through shared memory) and memory
// bandwidth per NUMA node.

#include "tools_api/topology.hpp"

#include <cstddef>
#include <vector>

namespace tandem::tools::topo_tool {

struct MeasureOptions {
  std::size_t bytes = std::size_t{64} << 20;  ///< per pass, per buffer
  int passes = 4;                             ///< timed passes (after one warm-up)
};

/// GB/s (1e9 bytes) of data delivered from a thread on `from` to a thread on `to` through a
/// ring of 1 MiB slots; each byte is written once by the sender and read once by the
/// receiver. `from == to` (same set): one thread's memcpy. Throws Error(Timeout) if a side
/// stops making progress for 60 s.
double pair_bandwidth(const tools_api::CpuList& from, const tools_api::CpuList& to,
                      const MeasureOptions& o);

/// GB/s of memory traffic (bytes read + bytes written, as STREAM's copy counts them) of one
/// thread per core of a NUMA node copying buffers it allocated itself (first touch: local),
/// of at least four times the node's caches together.
double node_bandwidth(const tools_api::Topology& t, const tools_api::NumaNode& node,
                      const MeasureOptions& o);

}  // namespace tandem::tools::topo_tool
