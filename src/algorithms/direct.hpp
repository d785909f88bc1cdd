#pragma once
// Helpers of the one-copy ("direct") algorithms over registered buffers: whether every peer
// is reached through shared memory, and the all-to-all of small messages by which the ranks
// tell each other where their buffers lie and sync between phases.

#include "algorithms/common.hpp"
#include "transport/regions.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tandem::algorithms::detail {

/// Where one rank's buffers lie; region 0: not registered. Fits a shm slot's inline payload.
struct Where {
  std::uint32_t in_region = 0;
  std::uint32_t out_region = 0;
  std::uint64_t in_offset = 0;
  std::uint64_t out_offset = 0;
};
static_assert(sizeof(Where) == 24);

/// True when every peer is reached through shared memory (then all ranks see the same).
inline bool all_shm(const transport::Mesh& mesh) noexcept {
  if (!mesh.regions()) return false;
  for (int p = 0; p < mesh.size(); ++p)
    if (p != mesh.rank() && mesh.link(p) != transport::Link::shm) return false;
  return true;
}

/// Where [p, p + bytes) lies in this rank's registered memory ({0, 0}: nowhere).
inline transport::RegionSpot spot_of(const transport::Mesh& mesh, const void* p,
                                     std::size_t bytes) noexcept {
  const auto at = mesh.regions()->locate(p, bytes);
  return at ? *at : transport::RegionSpot{};
}

/// Every rank sends `bytes` of `src` to every other and receives rank p's into
/// dst + p * bytes: the exchange of Where, and (one byte) the syncs between phases.
inline void exchange(const Call& call, transport::Mesh& mesh, const void* src, std::size_t bytes,
                     std::byte* dst) {
  const int n = mesh.size();
  const int r = mesh.rank();
  Batch batch(mesh, 2 * static_cast<std::size_t>(n - 1));
  for (int k = 1; k < n; ++k) {
    const int p = mod(r - k, n);
    batch.post(transport::Request::make_recv(p, call.tag, dst + static_cast<std::size_t>(p) * bytes,
                                             bytes));
  }
  for (int k = 1; k < n; ++k)
    batch.post(transport::Request::make_send(mod(r + k, n), call.tag, src, bytes));
  wait_all(mesh, {&batch}, call.deadline);
}

/// Runs `call` as the built-in ring of its collective: what a direct algorithm does when the
/// buffers are not registered on every rank or a peer is not reached through shared memory.
inline void run_ring(const Call& call, Context& ctx) {
  const Algorithm* ring = Registry::builtin().find(call.kind, "ring");
  TANDEM_CHECK(ring != nullptr, "the ring {} is not registered", to_string(call.kind));
  ring->run(call, ctx);
}

/// One byte to and from every peer: nobody passes it before every rank reached it.
inline void sync(const Call& call, transport::Mesh& mesh) {
  const std::byte mark{1};
  std::byte marks[64];
  std::vector<std::byte> many;
  std::byte* dst = marks;
  if (mesh.size() > 64) {
    many.resize(static_cast<std::size_t>(mesh.size()));
    dst = many.data();
  }
  exchange(call, mesh, &mark, 1, dst);
}

}  // namespace tandem::algorithms::detail
