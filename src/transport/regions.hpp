#pragma once
// Registered memory (Communicator::allocate): each rank's buffer is a shared-memory segment
// that every same-host peer maps, so an algorithm can read a peer's buffer directly. An
// algorithm asks where its buffer lies (locate) and where a peer's buffer of the same region
// is mapped in this process (peer_view); both answer "not shared" rather than fail, and the
// algorithm then falls back to messages.
//
// Regions are numbered in allocation order; every rank of the mesh allocates in the same
// order with the same sizes, so region k of one rank pairs with region k of every other.
// Segment names travel through the store and are unlinked once every peer mapped them, so a
// crash afterwards leaves nothing in /dev/shm.

#include <tandem/shared_buffer.hpp>
#include <tandem/types.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace tandem::store {
class Store;
}

namespace tandem::transport {

/// Where local memory lies in a registered region.
struct RegionSpot {
  std::uint32_t region = 0;  ///< 1, 2, ... in allocation order; 0: none
  std::uint64_t offset = 0;  ///< bytes from the region's start
};

class RegionPool : public std::enable_shared_from_this<RegionPool> {
 public:
  /// `peers`: the same-host ranks reached through shared memory (not empty).
  RegionPool(int rank, std::vector<int> peers);
  ~RegionPool();
  RegionPool(const RegionPool&) = delete;
  RegionPool& operator=(const RegionPool&) = delete;

  /// Collective over this rank and its same-host peers (every rank in the same order, with
  /// the same `bytes`): creates this rank's segment, publishes its name under `store`
  /// ("region/<k>/..."), maps every peer's, and waits until all mapped all before unlinking.
  /// Throws Error(InvalidArgument) when a peer asked for another size, Error(Timeout) at
  /// `deadline`, Error(Io) when /dev/shm cannot hold it; `check_peers` (when set) runs while
  /// it waits and throws when a rank is gone.
  SharedBuffer allocate(std::size_t bytes, store::Store& store, Deadline deadline,
                        const std::function<void()>& check_peers);

  /// The region and offset of [p, p + bytes) when it lies wholly in one live region of this
  /// rank; nullopt otherwise.
  std::optional<RegionSpot> locate(const void* p, std::size_t bytes) const noexcept;
  /// Where `peer`'s copy of `spot.region`, at `spot.offset`, is mapped in this process;
  /// nullptr when this rank does not map it (no such live region, not a same-host peer, or
  /// [offset, offset + bytes) out of the region).
  const void* peer_view(int peer, RegionSpot spot, std::size_t bytes) const noexcept;

  const std::vector<int>& peers() const noexcept { return peers_; }

 private:
  struct Region;
  class Handle;
  void release(std::uint32_t id) noexcept;

  int rank_;
  std::vector<int> peers_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Region>> regions_;
  std::uint32_t next_id_ = 1;
};

}  // namespace tandem::transport
