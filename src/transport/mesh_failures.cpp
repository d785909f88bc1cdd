// Liveness and control: what the control connections say about peers (died, aborted, left),
// the errors that name them, and the poisoned state every later call rethrows.

#include "transport/mesh_impl.hpp"

#include <fmt/format.h>

namespace tandem::transport::detail {

void MeshImpl::check_controls(int timeout_ms) {
  if (tcp_) serve_connections();
  pfds_.clear();
  for (const Control& c : controls_)
    if (c.watched()) pfds_.push_back({c.fd(), POLLIN | POLLRDHUP, 0});
  if (!pfds_.empty() && ::poll(pfds_.data(), pfds_.size(), timeout_ms) > 0) {
    read_controls();
  } else {
    note_ended_peers();
  }
  raise_failed_peers();
}

void MeshImpl::read_controls() noexcept {
  for (Control& c : controls_) c.read_available();
  note_ended_peers();  // after the sockets: a peer that said BYE and then ended is not lost
}

void MeshImpl::note_ended_peers() noexcept {
  if (shm_) {
    for (int p : shm_->ended_peers())
      controls_[static_cast<std::size_t>(p)].mark_lost(
          "its process ended without closing its communicator: the kernel released the "
          "shared-memory lock it held");
  }
}

std::vector<int> MeshImpl::dead_peers() noexcept {
  read_controls();
  std::vector<int> out;
  for (std::size_t p = 0; p < controls_.size(); ++p)
    if (controls_[p].state() == Control::State::lost) out.push_back(static_cast<int>(p));
  return out;
}

// Throws for a peer that died or aborted (the state stays, so every later wait that needs
// to block throws too). What it sent before is still delivered: a wait that can finish
// with the data at hand finishes. A death seen directly is reported before an abort that
// may only echo it.
void MeshImpl::raise_failed_peers() {
  bool failed = false;
  for (const Control& c : controls_)
    failed = failed || c.state() == Control::State::lost || c.state() == Control::State::aborted;
  if (!failed) return;
  progress_all();
  if (all_complete(waiting_)) return;
  for (auto state : {Control::State::lost, Control::State::aborted})
    for (std::size_t p = 0; p < controls_.size(); ++p)
      if (controls_[p].state() == state) raise_state(static_cast<int>(p));
}

void MeshImpl::raise_state(int peer) {
  const Control& c = controls_[static_cast<std::size_t>(peer)];
  if (c.state() == Control::State::lost) {
    // Every other peer seen lost by now is named too: the survivors of several deaths at
    // once then know them all (Communicator::lost_ranks(), shrink_lost()).
    std::string also;
    for (std::size_t q = 0; q < controls_.size(); ++q) {
      if (static_cast<int>(q) == peer || controls_[q].state() != Control::State::lost) continue;
      also += fmt::format("{}{}", also.empty() ? ". Also lost: " : ", ", who(static_cast<int>(q)));
    }
    TANDEM_THROW(ErrorCode::PeerLost,
                 "{} died or closed its connection ({}); this rank cannot complete collectives "
                 "without it. Check that rank's output and exit status (a crash, the OOM "
                 "killer, a signal){}",
                 who(peer), c.reason(), also);
  }
  if (c.state() == Control::State::aborted && c.abort_code() == ErrorCode::PeerLost)
    TANDEM_THROW(ErrorCode::PeerLost, "{} (reported by {}, which lost it first)", c.reason(),
                 who(peer));
  if (c.state() == Control::State::aborted)
    TANDEM_THROW(ErrorCode::Aborted, "{} aborted: {}", who(peer), c.reason());
}

// A peer that closed its mesh normally will neither send nor receive again. Its BYE was
// sent after everything it published, so one progress pass after reading the BYE sees all
// of that: only when that pass moves nothing is the peer known to owe data. Returns whether
// that pass moved anything (it may have completed what the caller waits for).
bool MeshImpl::check_left_peers() {
  auto stranded = [this]() -> const Endpoint* {
    for (const Endpoint* ep : active_) {
      if (!ep->busy() ||
          controls_[static_cast<std::size_t>(ep->peer())].state() != Control::State::left)
        continue;
      // Over a network, data may still be in flight behind the BYE: its end of file (tcp) or
      // UCX's error report decides.
      if (ep->link() != Link::shm && ep->sends().empty()) continue;
      return ep;
    }
    return nullptr;
  };
  if (stranded() == nullptr) return false;
  if (progress_all()) return true;
  if (const Endpoint* ep = stranded()) throw_left(ep->peer());
  return false;
}

void MeshImpl::throw_left(int peer) {
  const Endpoint* ep = endpoints_[static_cast<std::size_t>(peer)].get();
  std::string pending = "a transfer";
  if (ep != nullptr) {
    std::uint64_t in = 0, out = 0;
    for (const Request* r = ep->recvs().front(); r != nullptr; r = r->next)
      in += r->bytes - r->done;
    for (const Request* r = ep->sends().front(); r != nullptr; r = r->next)
      out += r->bytes - r->done;
    if (!ep->recvs().empty())
      pending = fmt::format("to receive {} more bytes from it", in);
    else
      pending = fmt::format("to send {} more bytes to it", out);
  }
  TANDEM_THROW(ErrorCode::PeerLost,
               "{} left normally (closed its communicator) while this rank still expected {}: "
               "the ranks called collectives a different number of times, or one stopped early",
               who(peer), pending);
}

void MeshImpl::raise_peer_closed(int peer, std::string_view detail) {
  Control& c = controls_[static_cast<std::size_t>(peer)];
  const auto until = Clock::now() + kCloseGrace;
  c.read_available();
  while (c.state() == Control::State::up && c.watched()) {
    const auto now = Clock::now();
    if (now >= until) break;
    pollfd pfd{c.fd(), POLLIN | POLLRDHUP, 0};
    ::poll(&pfd, 1, poll_ms(until - now));
    c.read_available();
  }
  if (c.state() == Control::State::left) throw_left(peer);
  raise_state(peer);
  TANDEM_THROW(ErrorCode::PeerLost, "lost the connection to {}: {}; it may have died or been reset",
               who(peer), detail);
}

std::string MeshImpl::who(int peer) const {
  const PeerInfo& p = peers_[static_cast<std::size_t>(peer)];
  return fmt::format("rank {} (host {}, pid {})", peer, p.host, p.pid);
}

// Called from a catch block: poisons the mesh with the exception in flight and rethrows it
// (an unexpected one becomes Error(Internal)).
void MeshImpl::fail_current() {
  std::exception_ptr e = std::current_exception();
  try {
    throw;
  } catch (const Error& err) {
    // Passed on to every connected peer, losses and aborts too: a peer connected to neither
    // the lost rank nor the one that aborted learns of it this way, within a hop per
    // setup_peers() step (each rank tells once).
    poison(e, err.code(), err.message(), true);
  } catch (const std::exception& ex) {
    Error err(ErrorCode::Internal, fmt::format("unexpected error in the transport: {}", ex.what()));
    e = std::make_exception_ptr(err);
    poison(e, err.code(), err.message(), true);
  }
  drop_all();
  std::rethrow_exception(error());
}

void MeshImpl::poison(std::exception_ptr e, ErrorCode code, const std::string& message,
                      bool tell) noexcept {
  {
    std::lock_guard lock(mu_);
    if (!error_) {
      error_ = std::move(e);
      code_ = code;
      message_ = message;
      poisoned_.store(true, std::memory_order_release);
    }
    if (tell && !told_peers_) {
      told_peers_ = true;
      for (Control& c : controls_) c.send_abort(code_, message_);
      if (shm_) shm_->ring_peers();
    }
  }
  // A waiter may be asleep on the doorbell (abort() from another thread).
  if (shm_) shm_->ring_self();
}

void MeshImpl::throw_if_poisoned() {
  if (!poisoned_.load(std::memory_order_acquire)) return;
  drop_all();
  std::rethrow_exception(error());
}

void MeshImpl::drop_all() noexcept {
  for (Endpoint* ep : active_) ep->drop();
}

}  // namespace tandem::transport::detail
