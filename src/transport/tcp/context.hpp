#pragma once
// Per-communicator tcp state: the listening socket and the handshake that connects every
// pair of ranks. Rank i connects to every j > i and accepts every j < i; each connection
// (the control connection, then one per data stream) opens with a HELLO both ways that
// carries the shared token, so a stranger or a rank of another job is turned away.

#include "core/net.hpp"
#include "transport/endpoint.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tandem::transport::tcp {

/// How to reach one peer, and how many data streams to open to it (0 for a peer reached
/// through shared memory: it gets only a control connection).
struct Target {
  std::string host;
  std::uint16_t port = 0;
  int streams = 0;
  bool same_host = false;  ///< the peer runs on this host (its traffic stays in the kernel)
};

/// The sockets of one peer once connected (non-blocking).
struct PeerSockets {
  net::Fd control;
  std::vector<net::Fd> data;
};

class Context {
 public:
  /// Listens on `address`:0.
  Context(int rank, int size, std::string address, std::string token);

  const std::string& address() const noexcept { return address_; }
  std::uint16_t port() const noexcept { return port_; }

  /// Connects every pair (self and unreachable entries of `targets` are ignored), then closes
  /// the listener. Throws Error(Timeout) at `deadline` naming the ranks still missing.
  /// `check_peers` (when set) runs every kLivenessPoll while connections are missing and
  /// throws when a rank is gone.
  std::vector<PeerSockets> connect_all(const std::vector<Target>& targets, Deadline deadline,
                                       const std::function<void()>& check_peers = {});

  std::unique_ptr<transport::Endpoint> make_endpoint(int peer, std::vector<net::Fd> data,
                                                     PeerFailureHandler& failures) const;

  /// Connections turned away during connect_all (bad HELLO or token).
  std::size_t rejected() const noexcept { return rejected_; }

 private:
  int rank_;
  int size_;
  std::string address_;
  std::string token_;
  net::Fd listener_;
  std::uint16_t port_ = 0;
  std::size_t rejected_ = 0;
};

}  // namespace tandem::transport::tcp
