#pragma once
// Per-communicator shared-memory state: this rank's segment (doorbell + inbound channels)
// and the mappings of every same-host peer's segment. Names are unlinked as soon as every
// peer has mapped them, so a crash later leaves nothing behind in /dev/shm.

#include "core/futex.hpp"
#include "transport/endpoint.hpp"
#include "transport/shm/wire.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::transport::shm {

/// An owned MAP_SHARED mapping.
class Mapping {
 public:
  Mapping() noexcept = default;
  Mapping(void* data, std::size_t bytes) noexcept : data_(data), bytes_(bytes) {}
  Mapping(Mapping&& o) noexcept : data_(o.data_), bytes_(o.bytes_) { o.data_ = nullptr; }
  Mapping& operator=(Mapping&& o) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();

  void* data() const noexcept { return data_; }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

class Context {
 public:
  /// Creates this rank's segment, "/tandem-<run>-<pid>x<n>-<rank>", with one inbound channel
  /// per rank of `senders`. Throws Error(Io) when /dev/shm cannot hold it, saying what to do.
  Context(int rank, std::vector<int> senders, std::size_t buffer_bytes, std::string_view run_id);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const std::string& name() const noexcept { return name_; }

  /// Maps `peer`'s segment `name` and validates it; the last of its peers to map it
  /// unlinks the name.
  void attach(int peer, const std::string& name);
  /// Whether every sender has mapped this rank's segment: its name is unlinked then, and this
  /// rank may close without stranding a peer that is still setting up.
  bool all_attached() const noexcept {
    return own_view_.header->mappers.load(std::memory_order_acquire) ==
           own_view_.header->channel_count;
  }
  /// The endpoint to `peer` (attach()ed before).
  std::unique_ptr<transport::Endpoint> make_endpoint(int peer, PeerFailureHandler& failures);

  /// One blocking slice on this rank's doorbell. Announces the sleep, runs `progress` once
  /// more (a peer that published before seeing the announcement is caught here), and only
  /// then waits on the futex. Returns what `progress` returned.
  template <class Progress>
  bool sleep(std::chrono::nanoseconds slice, Progress&& progress) {
    auto& bell = own_view_.doorbell->value;
    auto& sleeping = own_view_.sleeping->value;
    const std::uint32_t seen = bell.load(std::memory_order_acquire);
    sleeping.store(1, std::memory_order_relaxed);
    if (asymmetric_)
      core::heavy_fence();
    else
      std::atomic_thread_fence(std::memory_order_seq_cst);
    struct Awake {
      std::atomic<std::uint32_t>& flag;
      ~Awake() { flag.store(0, std::memory_order_relaxed); }
    } awake{sleeping};
    if (progress()) return true;
    wait_bell(seen, slice);
    return false;
  }
  /// Publishes the CPU this rank's waiting thread runs on (sched_getcpu()) for its peers.
  void publish_cpu(int cpu) noexcept {
    const auto v = static_cast<std::uint32_t>(cpu + 1);
    if (own_view_.cpu->value.load(std::memory_order_relaxed) != v)
      own_view_.cpu->value.store(v, std::memory_order_relaxed);
  }
  /// How many times this rank's endpoints woke a sleeping peer (the thread that owns the
  /// mesh counts; nothing else reads it concurrently).
  std::uint64_t woken() const noexcept { return woken_; }
  /// Whether a peer last published `cpu` as the CPU it waits on.
  bool peer_on_cpu(int cpu) const noexcept;
  /// Takes this rank's life lock (LifeLine) on the calling thread, which then must call
  /// release_life() before it ends and before this context is destroyed (the lock is on that
  /// thread's robust list, in memory that the destructor unmaps); peers read the thread's end
  /// without it as this process's death.
  void hold_life();
  void release_life() noexcept;
  /// The peers whose life lock the kernel released as its holder ended (their process died,
  /// or exited without closing), in attach order; every sleeper on those locks is woken too.
  /// Empty, without allocating, while all live.
  std::vector<int> ended_peers() noexcept;
  /// Wakes this rank if it sleeps on its doorbell (another thread aborted the mesh).
  void ring_self() noexcept;
  /// Wakes every peer that sleeps on its doorbell, so it reads the control frame just sent
  /// (ABORT or BYE) now rather than at the end of its sleep slice.
  void ring_peers() noexcept;

 private:
  // Of a peer's segment only the header and the one channel this rank writes are mapped.
  struct Peer {
    int rank = -1;
    std::string name;
    Mapping header;
    Mapping channel;
    SegmentView view;
    ChannelView outbound;
    bool ended = false;  ///< its life lock was seen released by the kernel
  };

  // Sleeps on the doorbell while it holds `seen`, and on the peers' life locks, at most `slice`.
  void wait_bell(std::uint32_t seen, std::chrono::nanoseconds slice) noexcept;

  int rank_;
  bool asymmetric_ = false;  ///< core::asymmetric_fences(), published in the segment header
  std::vector<int> senders_;
  std::string name_;
  Mapping own_;
  SegmentView own_view_;
  std::vector<Peer> peers_;
  std::uint64_t woken_ = 0;
  bool holding_life_ = false;
  std::vector<core::FutexWaiter> waiters_;  ///< wait_bell()'s, reused
};

}  // namespace tandem::transport::shm
