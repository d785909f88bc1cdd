#pragma once
// Per-communicator tcp state: the listening socket and the handshakes that connect this rank
// to its peers (tcp/connector.hpp), at setup and at a peer's first message.

#include "core/net.hpp"
#include "transport/endpoint.hpp"

#include <cstddef>
#include <cstdint>
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

class Connector;

class Context {
 public:
  /// Listens on `address`:0 for as long as the context lives.
  Context(int rank, int size, std::string address, std::string token);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const std::string& address() const noexcept { return address_; }
  std::uint16_t port() const noexcept { return port_; }

  /// The handshakes with every peer, at setup and after (tcp/connector.hpp).
  Connector& connector() noexcept { return *connector_; }

  std::unique_ptr<transport::Endpoint> make_endpoint(int peer, std::vector<net::Fd> data,
                                                     PeerFailureHandler& failures) const;

  /// Connections turned away (bad HELLO or token).
  std::size_t rejected() const noexcept { return rejected_; }

 private:
  int rank_;
  int size_;
  std::string address_;
  std::string token_;
  net::Fd listener_;
  std::uint16_t port_ = 0;
  std::size_t rejected_ = 0;
  std::unique_ptr<Connector> connector_;
};

}  // namespace tandem::transport::tcp
