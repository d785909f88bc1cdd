// The Mesh interface of MeshImpl: posting, testing, waiting, abort and close (the rest of
// it: mesh_impl.hpp).

#include "transport/mesh_impl.hpp"

#include <tandem/log.hpp>

#include <fmt/format.h>

namespace tandem::transport::detail {

void MeshImpl::attach(int peer, Control control, std::unique_ptr<Endpoint> ep) {
  controls_[static_cast<std::size_t>(peer)] = std::move(control);
  active_.push_back(ep.get());
  endpoints_[static_cast<std::size_t>(peer)] = std::move(ep);
}

void MeshImpl::adopt_shm(std::unique_ptr<shm::Context> ctx, std::vector<int> local) {
  shm_ = std::move(ctx);
  // A rank sleeping on its doorbell hears of a peer's death through the peer's life lock (a
  // dead holder's lock wakes it), or through the peer's control socket: the watch rings the
  // doorbell when one has news. The watch's thread lives as long as the mesh, so it holds
  // this rank's life lock.
  watch_ = std::make_unique<ControlWatch>([shm = shm_.get()] { shm->ring_self(); },
                                          [shm = shm_.get()] { shm->hold_life(); },
                                          [shm = shm_.get()] { shm->release_life(); });
  for (const Control& c : controls_)
    if (c.watched()) watch_->watch(c.fd());
  regions_ = std::make_shared<RegionPool>(rank_, std::move(local));
}

void MeshImpl::share_host(std::span<const int> same_host) {
  if (same_host.empty()) return;
  const auto below =
      std::count_if(same_host.begin(), same_host.end(), [this](int p) { return p < rank_; });
  spread_.emplace(static_cast<int>(below), static_cast<int>(same_host.size()) + 1);
}

Link MeshImpl::link(int peer) const noexcept {
  return peer >= 0 && peer < size() ? links_[static_cast<std::size_t>(peer)] : Link::self;
}

const PeerInfo& MeshImpl::peer_info(int peer) const {
  TANDEM_CHECK_ARG(peer >= 0 && peer < size(), "rank {} is not in this group of {} ranks", peer,
                   size());
  return peers_[static_cast<std::size_t>(peer)];
}

void MeshImpl::throw_if_pending(const Request& r) const {
  // Before its links are reset: reposting a pending request would cut its queue.
  for (const Endpoint* ep : active_) {
    if (ep->sends().contains(r) || ep->recvs().contains(r))
      TANDEM_THROW(ErrorCode::Internal,
                   "a {} of {} bytes was posted again while still pending with rank {}: a "
                   "request must complete (or the mesh be aborted) before it is reused",
                   to_string(r.kind), r.bytes, ep->peer());
  }
}

void MeshImpl::throw_not_runnable(const Request& r) const {
  TANDEM_CHECK_ARG(r.peer >= 0 && r.peer < size() && r.peer != rank_,
                   "cannot {} rank {}: peers are 0..{} except this rank ({})", to_string(r.kind),
                   r.peer, size() - 1, rank_);
  TANDEM_CHECK_ARG(
      r.bytes == 0 || (r.kind == RequestKind::send ? r.src != nullptr : r.dst != nullptr),
      "{} of {} bytes with rank {} has a null buffer", to_string(r.kind), r.bytes, r.peer);
  TANDEM_THROW(ErrorCode::InvalidArgument,
               "recv_reduce of {} bytes of {} from rank {} needs a local input of whole elements",
               r.bytes, tandem::to_string(r.dtype), r.peer);
}

namespace {

void reset(Request& r) noexcept {
  r.done = 0;
  r.complete = false;
  r.next = nullptr;
  r.priv[0] = r.priv[1] = 0;
}

}  // namespace

void MeshImpl::post(Request& r) {
  throw_if_poisoned();
  check_request(r);
  reset(r);
  endpoint(r.peer).post(r);
}

void MeshImpl::transfer(std::span<Request* const> rs, Deadline deadline) {
  throw_if_poisoned();
  for (const Request* r : rs) check_request(*r);
  bool queued = false;
  try {
    for (Request* r : rs) {
      // What moving it at once reads; the queue's fields only for a request that is posted.
      r->done = 0;
      r->complete = false;
      // A request behind a queued one of its kind (same peer) is queued too: complete_now()
      // declines it, so the FIFO order holds.
      Endpoint& ep = endpoint(r->peer);
      if (!ep.complete_now(*r)) {
        reset(*r);
        ep.post(*r);
        queued = true;
      }
    }
  } catch (...) {
    waiting_ = rs;
    fail_current();
  }
  if (queued) wait(rs, deadline);
}

bool MeshImpl::test(std::span<Request* const> rs) {
  throw_if_poisoned();
  waiting_ = rs;
  try {
    if (progress_all(), all_complete(rs)) return true;
    check_left_peers();
    const auto now = Clock::now();
    if (now >= next_control_check_) {
      next_control_check_ = now + kControlPeriod;
      check_controls(0);
    }
    return all_complete(rs);
  } catch (...) {
    fail_current();
  }
}

void MeshImpl::wait(std::span<Request* const> rs, Deadline deadline) {
  throw_if_poisoned();
  waiting_ = rs;
  try {
    run_wait(rs, deadline);
  } catch (...) {
    fail_current();
  }
}

int MeshImpl::probe(std::uint32_t tag, int from) {
  throw_if_poisoned();
  const int n = size();
  try {
    serve_connections();  // a sender's first message needs its connection accepted
    for (int k = 0; k < n; ++k) {
      const int p = ((from % n) + n + k) % n;
      Endpoint* ep = endpoints_[static_cast<std::size_t>(p)].get();
      std::uint32_t next = 0;
      if (ep != nullptr && ep->recvs().empty() && ep->peek(next) && next == tag) return p;
    }
  } catch (...) {
    fail_current();
  }
  return -1;
}

void MeshImpl::check_alive() {
  throw_if_poisoned();
  waiting_ = {};  // nothing is waited for here: a failed peer is raised below
  try {
    check_controls(0);
    for (auto state : {Control::State::lost, Control::State::aborted})
      for (std::size_t p = 0; p < controls_.size(); ++p)
        if (controls_[p].state() == state) raise_state(static_cast<int>(p));
  } catch (...) {
    fail_current();
  }
}

void MeshImpl::abort(const Error& error) noexcept {
  poison(std::make_exception_ptr(error), error.code(), error.message(), true);
}

std::exception_ptr MeshImpl::error() const noexcept {
  std::lock_guard lock(mu_);
  return error_;
}

void MeshImpl::close() noexcept {
  if (closed_) return;
  closed_ = true;
  {
    std::lock_guard lock(mu_);
    if (!told_peers_) {
      told_peers_ = true;
      if (!error_) {
        // What the peers were sent reaches them before the goodbye does.
        const Deadline deadline = deadline_in(kFlushBound);
        for (auto& ep : endpoints_)
          if (ep) ep->flush(deadline);
      }
      for (Control& c : controls_) {
        if (error_)
          c.send_abort(code_, message_);
        else
          c.send_bye();
      }
      if (shm_) shm_->ring_peers();
    }
    if (!error_) {
      error_ = std::make_exception_ptr(
          Error(ErrorCode::Aborted, fmt::format("the mesh of rank {} was closed", rank_)));
      message_ = "closed";
      poisoned_.store(true, std::memory_order_release);
    }
  }
  watch_.reset();  // before the doorbell it rings and the sockets it watches go
  drop_all();
  active_.clear();
  endpoints_.clear();
  dialing_.clear();
  shm_.reset();
  tcp_.reset();  // its listener: a peer that dials now is refused, and knows this rank is gone
  for (Control& c : controls_) c.close();
}

}  // namespace tandem::transport::detail
