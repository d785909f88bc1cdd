// Waiting for requests: progress passes, a bounded spin, then sleeps of at most kSlice on a
// futex (shared memory) or poll() (sockets and control connections).

#include "core/futex.hpp"
#include "transport/mesh_impl.hpp"
#include "transport/tcp/connector.hpp"

#include <tandem/log.hpp>

#include <fmt/ranges.h>

#include <sched.h>

namespace tandem::transport::detail {
namespace {

// A sched_yield() that finds no other thread to run returns well within this; one that took
// longer ran another thread on this CPU meanwhile.
constexpr auto kGaveAway = std::chrono::microseconds(2);

}  // namespace

void MeshImpl::run_wait(std::span<Request* const> rs, Deadline deadline) {
  // Completed requests stay complete: the scan resumes at the first one still pending, so
  // waiting on many requests costs O(n) in all, not per pass.
  std::size_t pending = 0;
  auto done = [&] {
    while (pending < rs.size() && rs[pending]->complete) ++pending;
    return pending == rs.size();
  };
  if (progress_all(), done()) return;
  // The clock is read every 8th fruitless pass only (a pass over shm costs a few
  // nanoseconds), the first time included: a small message usually lands within those
  // passes, and then the wait reads no clock at all. The deadline is checked from the
  // first reading on, within 8 passes of entering the wait.
  Clock::time_point start{};
  Clock::time_point spin_until{};
  const bool spin = options_.spin_time.count() > 0;  // 0: block after one fruitless pass
  for (unsigned i = 1;; ++i) {
    if (poisoned_.load(std::memory_order_relaxed)) throw_if_poisoned();
    const bool moved = progress_all();
    if (done()) return;
    if (!moved && spin && (i & 7) != 0) {
      if (options_.yield_always) {
        sched_yield();
      } else {
        core::cpu_relax();
      }
      continue;
    }
    const auto now = Clock::now();
    if (start == Clock::time_point{}) {
      start = now;
      spin_until = now + options_.spin_time;
      if (spin && shm_ && shm_->woken() != woken_seen_) {
        woken_seen_ = shm_->woken();
        spin_until = now + std::max<Clock::duration>(options_.spin_time, kSpinAfterWake);
      }
    }
    if (now >= deadline) throw_timeout(rs, start);
    if (now >= next_control_check_) {
      next_control_check_ = now + kControlPeriod;
      check_controls(0);
      // A peer that failed after sending its last message: the pass that noticed the
      // failure delivered it and everything waited for may be complete now.
      if (done()) return;
    }
    if (moved) {
      spin_until = std::max(spin_until, now + options_.spin_time);
    } else if (now >= spin_until) {
      block(deadline);
    } else if (options_.yield_always || (i & 15) == 0) {
      // The peer may be waiting for this very CPU (more busy threads than cores): let it
      // run. Two ranks left on one core by the scheduler otherwise take turns of a whole
      // spin time (docs/topology.md); a peer on its own core does not notice a yield that
      // finds nothing else to run.
      sched_yield();
      if (spread_ && Clock::now() - now > kGaveAway) spread_cpu();
    } else {
      core::cpu_relax();
    }
  }
}

void MeshImpl::spread_cpu() {
  const int cpu = ::sched_getcpu();
  if (cpu < 0) return;
  // Over shared memory the peers publish the CPU they wait on. Peers of this host over TCP
  // (TANDEM_SHM_DISABLE=1) publish nothing: the yield that gave this CPU away, while ranks of
  // this host wait, is the sign (on a busy host a move may follow another program's turn; it
  // is one pair of affinity calls, at most once per CpuSpread::kRetry).
  if (shm_) {
    shm_->publish_cpu(cpu);
    if (!shm_->peer_on_cpu(cpu)) return;
  }
  const int to = spread_->move_off(cpu);
  if (to >= 0)
    TANDEM_INFO(shm, "rank {} waited on CPU {} with a local peer; moved to CPU {}", rank_, cpu, to);
}

bool MeshImpl::progress_all() {
  bool moved = !dialing_.empty() && serve_connections();
  for (Endpoint* ep : active_)
    if (ep->busy()) moved = ep->progress() || moved;
  return moved;
}

// One sleep of at most kSlice, on whatever can wake this rank. Returns at once when the
// look at peers that left moved data: the caller checks its requests again first.
void MeshImpl::block(Deadline deadline) {
  if (check_left_peers()) return;
  bool shm_busy = false;
  bool tcp_busy = false;
  for (const Endpoint* ep : active_)
    if (ep->busy()) (ep->link() == Link::shm ? shm_busy : tcp_busy) = true;
  if (!shm_busy && !tcp_busy) {
    // Nothing is pending: unless a waited request is complete (then there is nothing to
    // sleep for), that request is in no queue of this mesh.
    const auto lost = std::find_if(waiting_.begin(), waiting_.end(),
                                   [](const Request* r) { return !r->complete; });
    if (lost == waiting_.end()) return;
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "wait() on a {} of {} bytes {} rank {} that was never posted to this mesh (or "
                 "was posted to another one)",
                 to_string((*lost)->kind), (*lost)->bytes,
                 (*lost)->kind == RequestKind::send ? "to" : "from", (*lost)->peer);
  }
  const auto slice = std::min<Clock::duration>(kSlice, deadline - Clock::now());
  if (shm_busy && !tcp_busy) {
    shm_->sleep(slice, [this] { return progress_all(); });
    check_controls(0);
    return;
  }
  pfds_.clear();
  for (const Control& c : controls_)
    if (c.watched()) pfds_.push_back({c.fd(), POLLIN | POLLRDHUP, 0});
  const std::size_t n_controls = pfds_.size();
  bool ready = false;
  for (const Endpoint* ep : active_)
    if (ep->busy()) ready = ep->add_poll_fds(pfds_) || ready;
  if (ready) return;
  // The listener and the handshakes in flight: a peer's first message may need them.
  const std::size_t n_endpoints = pfds_.size();
  if (tcp_) tcp_->connector().add_poll_fds(pfds_);
  const int rc = ::poll(pfds_.data(), pfds_.size(), poll_ms(shm_busy ? kMixedSlice : slice));
  if (rc < 0 && errno != EINTR)
    TANDEM_THROW(ErrorCode::Io, "poll() failed while waiting for peers: {}", errno_text(errno));
  bool control_event = false;
  for (std::size_t i = 0; i < n_controls; ++i)
    control_event = control_event || pfds_[i].revents != 0;
  if (control_event) read_controls();
  for (std::size_t i = n_endpoints; i < pfds_.size(); ++i) {
    if (pfds_[i].revents != 0) {
      serve_connections();
      break;
    }
  }
  raise_failed_peers();
}

void MeshImpl::throw_timeout(std::span<Request* const> rs, Clock::time_point start) {
  std::vector<std::string> what;
  bool partial = false;  // some bytes moved: the peer posted its side and then stalled
  for (const Request* r : rs) {
    if (r->complete) continue;
    partial = partial || r->done > 0;
    if (what.size() == 8) {
      what.emplace_back("...");
      break;
    }
    what.push_back(fmt::format("{} {} rank {} ({}{}): {} of {} bytes, tag {:#010x}",
                               to_string(r->kind), r->kind == RequestKind::send ? "to" : "from",
                               r->peer, to_string(link(r->peer)), connection_status(r->peer),
                               r->done, r->bytes, r->tag));
  }
  TANDEM_THROW(ErrorCode::Timeout,
               "rank {} timed out after {:.3f} s waiting for point-to-point transfers: {}. {}. "
               "Raise TANDEM_TIMEOUT if the work legitimately takes longer",
               rank_, std::chrono::duration<double>(Clock::now() - start).count(),
               fmt::join(what, "; "),
               partial ? "Some transfers had started and then stopped moving: a peer is stuck, "
                         "or the network between the ranks stalled"
                       : "The peers named never posted the matching transfer: the ranks are "
                         "calling different collectives, or one is stuck or much slower");
}

}  // namespace tandem::transport::detail
