#pragma once
// Per-communicator UCX state: one UCP context and one worker (progressed only by the thread
// waiting in the mesh), its address for the peers (published through the store), and the
// endpoints to the peers reached through UCX. UCX chooses its own transports and devices
// (UCX_TLS, UCX_NET_DEVICES and the rest of UCX's environment pass through).

#include "transport/endpoint.hpp"

#include <memory>
#include <string>
#include <vector>

namespace tandem::transport::ucx {

/// Whether this build has UCX.
bool available() noexcept;
/// Whether this host has an RDMA device UCX could use (an InfiniBand/RoCE device in
/// /sys/class/infiniband).
bool rdma_device_present();

/// UCX's transports and devices of an endpoint this context made ("tcp/eth0"), for logs.
std::string describe(const transport::Endpoint& ep);

class Context : public std::enable_shared_from_this<Context> {
 public:
  /// Creates the UCP context and worker. Throws Error(Unsupported) without UCX in this build,
  /// Error(Io) naming UCX's status when it cannot start.
  static std::shared_ptr<Context> create(int rank);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  /// This worker's address (binary) for the peers.
  const std::string& address() const noexcept { return address_; }

  /// The endpoint to `peer`, whose worker address is `peer_address` (binary).
  std::unique_ptr<transport::Endpoint> make_endpoint(int peer, const std::string& peer_address,
                                                     PeerFailureHandler& failures);

  struct State;  ///< UCX handles (only the implementation sees UCX's headers)
  State& state() noexcept { return *state_; }
  int rank() const noexcept { return rank_; }

 private:
  Context(int rank, std::unique_ptr<State> state);

  int rank_;
  std::unique_ptr<State> state_;
  std::string address_;
};

}  // namespace tandem::transport::ucx
