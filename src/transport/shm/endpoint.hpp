#pragma once
// One same-host peer: sends go chunk by chunk into the peer's inbound channel (in its
// segment), receives come out of ours. The receiver consumes each chunk straight from the
// slot (copy out, or reduce into the destination): data crosses memory once per side.

#include "transport/endpoint.hpp"
#include "transport/shm/wire.hpp"

#include <cstdint>

namespace tandem::transport::shm {

struct Wake {
  std::atomic<std::uint32_t>* doorbell = nullptr;
  std::atomic<std::uint32_t>* sleeping = nullptr;
  bool asymmetric = false;         ///< both sides use asymmetric fences: no full fence here
  std::uint64_t* woken = nullptr;  ///< the context's count of sleeping peers woken
};

class Endpoint final : public transport::Endpoint {
 public:
  Endpoint(int peer, PeerFailureHandler& failures, ChannelView outbound, ChannelView inbound,
           Wake peer_wake) noexcept;

  Link link() const noexcept override { return Link::shm; }
  bool progress() override;
  bool complete_now(Request& r) override;
  bool peek(std::uint32_t& tag) override;

 private:
  bool progress_sends();
  bool progress_recvs();
  // One chunk of `r` (its next) into a free slot, or out of the slot where it arrived:
  // whether it moved.
  bool send_chunk(Request& r);
  bool recv_chunk(Request& r);
  void wake_peer() noexcept;

  ChannelView out_;
  ChannelView in_;
  Wake wake_;
  // Sender state: chunks published so far, the slot of the next one, and the receiver's
  // `consumed` as last read (re-read only when the ring looks full).
  std::uint64_t sent_ = 0;
  std::uint32_t send_slot_ = 0;
  std::uint64_t consumed_seen_ = 0;
  // Receiver state.
  std::uint64_t received_ = 0;
  std::uint32_t recv_slot_ = 0;
  // Chunks through the slots' data areas (not headers or small areas) still to be sent or
  // received with a prefetch of the next slot's data: one lap. Its pages are walked at setup
  // too, but by the first large message a program's own buffers may have pushed them out of
  // the TLB. Later laps do not prefetch: there the next slot's line is in the peer's cache,
  // and a prefetch for writing costs more than it saves (docs/benchmarks-small.md).
  std::uint32_t cold_sends_ = 0;
  std::uint32_t cold_recvs_ = 0;
};

}  // namespace tandem::transport::shm
