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

 private:
  bool progress_sends();
  bool progress_recvs();
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
};

}  // namespace tandem::transport::shm
