#pragma once
// Helpers of the one-copy ("direct") algorithms over registered buffers: whether every peer
// is reached through shared memory, and the all-to-all of small messages by which the ranks
// tell each other where their buffers lie and sync between phases.

#include "algorithms/cma.hpp"
#include "algorithms/common.hpp"
#include "core/coarse_clock.hpp"
#include "transport/regions.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <unistd.h>
#include <vector>

namespace tandem::algorithms::detail {

/// Where one rank's buffers lie: in a registered region (region nonzero) at an offset, or
/// (region 0) at an address of its own process, with its pid and whether it may use
/// cross-memory attach (algorithms/cma.hpp) for the reads and writes of plain buffers. Fits a
/// shm slot's inline payload (40 bytes).
struct Where {
  std::uint32_t in_region = 0;
  std::uint32_t out_region = 0;
  std::uint64_t in_at = 0;   ///< offset in in_region, or (region 0) the input's address
  std::uint64_t out_at = 0;  ///< offset in out_region, or (region 0) the output's address
  std::int32_t pid = 0;
  std::uint32_t cma = 0;  ///< cma_tag(): 0, or its pid namespace's tag when it may use CMA
  /// The input's size, the same on every rank of the collectives that tell each other
  /// where their buffers lie: checked before anything is copied into another rank's buffer
  /// (the call's tag hashes the size into 32 bits; this makes sure).
  std::uint64_t in_bytes = 0;
};
static_assert(sizeof(Where) == 40);

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
/// With `src_stride` nonzero, rank p is sent src + p * src_stride instead (a message of its own
/// for each peer).
inline void exchange(const Call& call, transport::Mesh& mesh, const void* src, std::size_t bytes,
                     std::byte* dst, std::size_t src_stride = 0) {
  const int n = mesh.size();
  const int r = mesh.rank();
  Batch batch(mesh, 2 * static_cast<std::size_t>(n - 1));
  for (int k = 1; k < n; ++k) {
    const int p = mod(r - k, n);
    batch.post(transport::Request::make_recv(p, call.tag, dst + static_cast<std::size_t>(p) * bytes,
                                             bytes));
  }
  for (int k = 1; k < n; ++k) {
    const int p = mod(r + k, n);
    batch.post(transport::Request::make_send(
        p, call.tag, static_cast<const std::byte*>(src) + static_cast<std::size_t>(p) * src_stride,
        bytes));
  }
  wait_all(mesh, {&batch}, call.deadline);
}

/// Rank `peer`'s registered memory at (`region`, `offset`), `bytes` long, as mapped here.
/// Throws Error(Internal) when it is not: every rank maps every peer's regions.
inline const std::byte* peer_buffer(const transport::Mesh& mesh, int peer, std::uint32_t region,
                                    std::uint64_t offset, std::size_t bytes) {
  const void* v = mesh.regions()->peer_view(peer, transport::RegionSpot{region, offset}, bytes);
  TANDEM_CHECK(v != nullptr, "rank {}'s registered buffer #{} is not mapped here", peer, region);
  return static_cast<const std::byte*>(v);
}

/// Tells every rank where this rank's input and output lie (the output's region only with
/// `with_out`; else its address) and learns where theirs do: every rank's Where, by rank.
inline std::vector<Where> exchange_where(const Call& call, transport::Mesh& mesh, bool with_out) {
  const transport::RegionSpot in = spot_of(mesh, call.in.data, call.in.bytes());
  const transport::RegionSpot out =
      with_out ? spot_of(mesh, call.out.data, call.out.bytes()) : transport::RegionSpot{};
  const auto at = [](const transport::RegionSpot& spot, const void* p) -> std::uint64_t {
    return spot.region != 0 ? spot.offset : reinterpret_cast<std::uintptr_t>(p);
  };
  const Where self{in.region,
                   out.region,
                   at(in, call.in.data),
                   at(out, call.out.data),
                   static_cast<std::int32_t>(::getpid()),
                   cma_tag(),
                   call.in.bytes()};
  std::vector<Where> where(static_cast<std::size_t>(mesh.size()));
  exchange(call, mesh, &self, sizeof self, reinterpret_cast<std::byte*>(where.data()));
  where[static_cast<std::size_t>(mesh.rank())] = self;
  for (int p = 0; p < mesh.size(); ++p) {
    const std::uint64_t theirs = where[static_cast<std::size_t>(p)].in_bytes;
    if (theirs != self.in_bytes) throw_size_mismatch(call, p, self.in_bytes, theirs);
  }
  return where;
}

/// Whether every rank's input (and, with `with_out`, output) lies in the same registered
/// regions. Every rank gets the same answer from the same facts, so all run one-copy or none.
inline bool all_registered(const std::vector<Where>& where, int rank, bool with_out) noexcept {
  const Where& self = where[static_cast<std::size_t>(rank)];
  for (const Where& w : where) {
    if (w.in_region == 0 || w.in_region != self.in_region) return false;
    if (with_out && (w.out_region == 0 || w.out_region != self.out_region)) return false;
  }
  return true;
}

/// Every rank's Where when all buffers are registered (see all_registered), else nullopt.
inline std::optional<std::vector<Where>> exchange_regions(const Call& call, transport::Mesh& mesh,
                                                          bool with_out) {
  auto where = exchange_where(call, mesh, with_out);
  if (!all_registered(where, mesh.rank(), with_out)) return std::nullopt;
  return where;
}

/// Runs `call` as the built-in ring of its collective: what a direct algorithm does when the
/// buffers are not registered on every rank or a peer is not reached through shared memory.
inline void run_ring(const Call& call, Context& ctx) {
  const Algorithm* ring = Registry::builtin().find(call.kind, "ring");
  TANDEM_CHECK(ring != nullptr, "the ring {} is not registered", to_string(call.kind));
  ctx.ran = ring;
  ring->run(call, ctx);
}

/// Between the pieces a rank writes into its peers' buffers (cross-memory attach): a peer
/// gives up on the call at its deadline, or when the mesh is aborted, and may then reuse its
/// buffer, so nothing more is written once this rank's deadline has passed (throws
/// Error(Timeout)) or, every `alive_every` pieces, once the mesh knows a peer failed (throws
/// as Mesh::check_alive, a poll of a few microseconds). `written`: pieces written so far.
inline void stop_writing_if_given_up(const Call& call, transport::Mesh& mesh, std::size_t written,
                                     std::size_t alive_every) {
  if (core::coarse_now() >= call.deadline)
    TANDEM_THROW(ErrorCode::Timeout,
                 "{}: the deadline passed while this rank wrote into its peers' buffers ({} "
                 "pieces written); it writes nothing more. Raise TANDEM_TIMEOUT if the work "
                 "legitimately takes longer",
                 to_string(call.kind), written);
  if (written % alive_every == 0) mesh.check_alive();
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
