// Connections at a peer's first message: the endpoint that holds requests until the peer is
// connected, and the mesh's side of the tcp connector (tcp/connector.hpp), which setup hands
// over with every peer's target set.

#include "transport/mesh_impl.hpp"
#include "transport/tcp/connector.hpp"

#include <tandem/log.hpp>

#include <fmt/format.h>

namespace tandem::transport::detail {
namespace {

// Holds what is posted to a peer until its connection is up; then the tcp endpoint takes the
// requests over (Endpoint::hand_over), in their order.
class Unconnected final : public Endpoint {
 public:
  using Endpoint::Endpoint;
  Link link() const noexcept override { return Link::tcp; }
  bool progress() override { return false; }
};

}  // namespace

void MeshImpl::adopt_tcp(std::unique_ptr<tcp::Context> tcp) {
  tcp_ = std::move(tcp);
}

Endpoint& MeshImpl::connect_on_demand(int peer) {
  if (!tcp_)
    TANDEM_THROW(ErrorCode::Internal, "rank {} has no connection to rank {} and cannot make one",
                 rank_, peer);
  serve_connections();  // the peer may have connected to this rank already
  if (Endpoint* ep = endpoints_[static_cast<std::size_t>(peer)].get()) return *ep;
  TANDEM_DETAIL(init, "rank {}: connecting to rank {} at the first message", rank_, peer);
  tcp_->connector().dial(peer);
  auto ep = std::make_unique<Unconnected>(peer, failures());
  active_.push_back(ep.get());
  dialing_.push_back(peer);
  endpoints_[static_cast<std::size_t>(peer)] = std::move(ep);
  return *endpoints_[static_cast<std::size_t>(peer)];
}

bool MeshImpl::serve_connections() {
  tcp::Connector& c = tcp_->connector();
  c.step();
  bool attached = false;
  for (auto& [peer, sockets] : c.take_connected()) {
    attach_connected(peer, std::move(sockets));
    attached = true;
  }
  if (dialing_.empty()) return attached;
  for (int peer : dialing_) {
    if (c.refused(peer))
      TANDEM_THROW(ErrorCode::PeerLost,
                   "{} no longer accepts connections ({}): it exited or closed its communicator "
                   "before this rank's first message to it. Check that rank's output and exit "
                   "status",
                   who(peer), c.status(peer));
  }
  const auto now = Clock::now();
  if (options_.check_peers && now >= next_liveness_) {
    next_liveness_ = now + kLivenessPoll;
    options_.check_peers();  // a rank that died will never connect
  }
  return attached;
}

void MeshImpl::attach_connected(int peer, tcp::PeerSockets sockets) {
  auto ep = tcp_->make_endpoint(peer, std::move(sockets.data), failures());
  auto& slot = endpoints_[static_cast<std::size_t>(peer)];
  const auto held = std::find(dialing_.begin(), dialing_.end(), peer);
  if (held != dialing_.end()) {
    dialing_.erase(held);
    slot->hand_over(*ep);
    *std::find(active_.begin(), active_.end(), slot.get()) = ep.get();
  } else if (slot) {
    TANDEM_THROW(ErrorCode::Internal, "rank {} was connected to rank {} twice", rank_, peer);
  } else {
    active_.push_back(ep.get());
  }
  {
    std::lock_guard lock(mu_);  // abort() may read the controls from another thread
    controls_[static_cast<std::size_t>(peer)] = Control(std::move(sockets.control));
  }
  if (watch_) watch_->watch(controls_[static_cast<std::size_t>(peer)].fd());
  slot = std::move(ep);
  TANDEM_DETAIL(init, "rank {}: connected to rank {} at its first message", rank_, peer);
}

std::string MeshImpl::connection_status(int peer) const {
  if (!tcp_ || std::find(dialing_.begin(), dialing_.end(), peer) == dialing_.end()) return {};
  return ", not connected: " + tcp_->connector().status(peer);
}

}  // namespace tandem::transport::detail
