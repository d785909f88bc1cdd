#include "transport/mesh.hpp"

#include "core/futex.hpp"
#include "transport/bootstrap.hpp"
#include "transport/control.hpp"
#include "transport/endpoint.hpp"
#include "transport/regions.hpp"
#include "transport/shm/context.hpp"
#include "transport/tcp/context.hpp"
#include "transport/tcp/wire.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>
#include <tandem/settings.hpp>
#include <tandem/store.hpp>

#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <poll.h>
#include <sched.h>
#include <unistd.h>

namespace tandem::transport {
namespace {

using namespace std::chrono_literals;

// Longest single sleep: a death that no socket reports (shm only) is noticed this fast.
constexpr auto kSlice = 50ms;
// Sleep slice when both shm and tcp transfers are pending: a futex and a socket cannot be
// waited on together, so the futex side is polled this often.
constexpr auto kMixedSlice = 1ms;
// While data keeps moving (no blocking), the control sockets are still read this often.
constexpr auto kControlPeriod = 1ms;
// After a data connection closes, how long to wait for the control connection to say why.
constexpr auto kCloseGrace = 200ms;

bool all_complete(std::span<Request* const> rs) noexcept {
  for (const Request* r : rs)
    if (!r->complete) return false;
  return true;
}

int poll_ms(std::chrono::nanoseconds d) noexcept {
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(d).count();
  return static_cast<int>(std::clamp<std::int64_t>(ms, 0, 60'000));
}

class MeshImpl final : public Mesh, private PeerFailureHandler {
 public:
  MeshImpl(int rank, const MeshOptions& options, std::vector<PeerInfo> peers,
           std::vector<Link> links)
      : rank_(rank),
        options_(options),
        peers_(std::move(peers)),
        links_(std::move(links)),
        controls_(peers_.size()),
        endpoints_(peers_.size()) {}
  ~MeshImpl() override { close(); }

  void attach(int peer, Control control, std::unique_ptr<Endpoint> ep) {
    controls_[static_cast<std::size_t>(peer)] = std::move(control);
    active_.push_back(ep.get());
    endpoints_[static_cast<std::size_t>(peer)] = std::move(ep);
  }
  void adopt_shm(std::unique_ptr<shm::Context> ctx, std::vector<int> local) {
    shm_ = std::move(ctx);
    regions_ = std::make_shared<RegionPool>(rank_, std::move(local));
  }
  const std::shared_ptr<RegionPool>& regions() const noexcept override { return regions_; }
  PeerFailureHandler& failures() noexcept { return *this; }

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return static_cast<int>(peers_.size()); }
  Link link(int peer) const noexcept override {
    return peer >= 0 && peer < size() ? links_[static_cast<std::size_t>(peer)] : Link::self;
  }
  const PeerInfo& peer_info(int peer) const override {
    TANDEM_CHECK_ARG(peer >= 0 && peer < size(), "rank {} is not in this group of {} ranks", peer,
                     size());
    return peers_[static_cast<std::size_t>(peer)];
  }

  void post(Request& r) override {
    throw_if_poisoned();
    if constexpr (kCheckQueues) {
      // Before its links are reset: reposting a pending request would cut its queue.
      for (const Endpoint* ep : active_) {
        if (ep->sends().contains(r) || ep->recvs().contains(r))
          TANDEM_THROW(ErrorCode::Internal,
                       "a {} of {} bytes was posted again while still pending with rank {}: a "
                       "request must complete (or the mesh be aborted) before it is reused",
                       to_string(r.kind), r.bytes, ep->peer());
      }
    }
    TANDEM_CHECK_ARG(r.peer >= 0 && r.peer < size() && r.peer != rank_,
                     "cannot {} rank {}: peers are 0..{} except this rank ({})", to_string(r.kind),
                     r.peer, size() - 1, rank_);
    TANDEM_CHECK_ARG(
        r.bytes == 0 || (r.kind == RequestKind::send ? r.src != nullptr : r.dst != nullptr),
        "{} of {} bytes with rank {} has a null buffer", to_string(r.kind), r.bytes, r.peer);
    TANDEM_CHECK_ARG(
        r.kind != RequestKind::recv_reduce ||
            ((r.src != nullptr || r.bytes == 0) && r.bytes % dtype_size(r.dtype) == 0),
        "recv_reduce of {} bytes of {} from rank {} needs a local input of whole elements", r.bytes,
        tandem::to_string(r.dtype), r.peer);
    r.done = 0;
    r.complete = false;
    r.next = nullptr;
    r.priv[0] = r.priv[1] = 0;
    endpoints_[static_cast<std::size_t>(r.peer)]->post(r);
  }

  bool test(std::span<Request* const> rs) override {
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

  void wait(std::span<Request* const> rs, Deadline deadline) override {
    throw_if_poisoned();
    waiting_ = rs;
    try {
      run_wait(rs, deadline);
    } catch (...) {
      fail_current();
    }
  }

  void abort(const Error& error) noexcept override {
    poison(std::make_exception_ptr(error), error.code(), error.message(), true);
  }

  std::exception_ptr error() const noexcept override {
    std::lock_guard lock(mu_);
    return error_;
  }

  void close() noexcept override {
    if (closed_) return;
    closed_ = true;
    {
      std::lock_guard lock(mu_);
      if (!told_peers_) {
        told_peers_ = true;
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
    drop_all();
    active_.clear();
    endpoints_.clear();
    shm_.reset();
    for (Control& c : controls_) c.close();
  }

 private:
  void run_wait(std::span<Request* const> rs, Deadline deadline) {
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
        core::cpu_relax();
        continue;
      }
      const auto now = Clock::now();
      if (start == Clock::time_point{}) {
        start = now;
        spin_until = now + options_.spin_time;
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
        spin_until = now + options_.spin_time;
      } else if (now >= spin_until) {
        block(deadline);
      } else if ((i & 15) == 0) {
        // The peer may be waiting for this very CPU (more busy threads than cores): let it
        // run. Two ranks left on one core by the scheduler otherwise take turns of a whole
        // spin time (100 us a call instead of 7 us measured); a peer on its own core does
        // not notice a yield that finds nothing else to run.
        sched_yield();
      } else {
        core::cpu_relax();
      }
    }
  }

  bool progress_all() {
    bool moved = false;
    for (Endpoint* ep : active_)
      if (ep->busy()) moved = ep->progress() || moved;
    return moved;
  }

  // One sleep of at most kSlice, on whatever can wake this rank. Returns at once when the
  // look at peers that left moved data: the caller checks its requests again first.
  void block(Deadline deadline) {
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
    for (const Endpoint* ep : active_)
      if (ep->busy()) ep->add_poll_fds(pfds_);
    const int rc = ::poll(pfds_.data(), pfds_.size(), poll_ms(shm_busy ? kMixedSlice : slice));
    if (rc < 0 && errno != EINTR)
      TANDEM_THROW(ErrorCode::Io, "poll() failed while waiting for peers: {}", errno_text(errno));
    bool control_event = false;
    for (std::size_t i = 0; i < n_controls; ++i)
      control_event = control_event || pfds_[i].revents != 0;
    if (control_event) read_controls();
    raise_failed_peers();
  }

  void check_controls(int timeout_ms) {
    pfds_.clear();
    for (const Control& c : controls_)
      if (c.watched()) pfds_.push_back({c.fd(), POLLIN | POLLRDHUP, 0});
    if (!pfds_.empty() && ::poll(pfds_.data(), pfds_.size(), timeout_ms) > 0) read_controls();
    raise_failed_peers();
  }

  void read_controls() noexcept {
    for (Control& c : controls_) c.read_available();
  }

  // Throws for a peer that died or aborted (the state stays, so every later wait that needs
  // to block throws too). What it sent before is still delivered: a wait that can finish
  // with the data at hand finishes. A death seen directly is reported before an abort that
  // may only echo it.
  void raise_failed_peers() {
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

  void raise_state(int peer) {
    const Control& c = controls_[static_cast<std::size_t>(peer)];
    if (c.state() == Control::State::lost)
      TANDEM_THROW(ErrorCode::PeerLost,
                   "{} died or closed its connection ({}); this rank cannot complete collectives "
                   "without it. Check that rank's output and exit status (a crash, the OOM "
                   "killer, a signal)",
                   who(peer), c.reason());
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
  bool check_left_peers() {
    auto stranded = [this]() -> const Endpoint* {
      for (const Endpoint* ep : active_) {
        if (!ep->busy() ||
            controls_[static_cast<std::size_t>(ep->peer())].state() != Control::State::left)
          continue;
        // Over tcp, data may still be in flight behind the BYE: its end of file decides.
        if (ep->link() == Link::tcp && ep->sends().empty()) continue;
        return ep;
      }
      return nullptr;
    };
    if (stranded() == nullptr) return false;
    if (progress_all()) return true;
    if (const Endpoint* ep = stranded()) throw_left(ep->peer());
    return false;
  }

  [[noreturn]] void throw_left(int peer) {
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

  void raise_peer_closed(int peer, std::string_view detail) override {
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
    TANDEM_THROW(ErrorCode::PeerLost,
                 "lost the connection to {}: {}; it may have died or been reset", who(peer),
                 detail);
  }

  [[noreturn]] void throw_timeout(std::span<Request* const> rs, Clock::time_point start) {
    std::vector<std::string> what;
    bool partial = false;  // some bytes moved: the peer posted its side and then stalled
    for (const Request* r : rs) {
      if (r->complete) continue;
      partial = partial || r->done > 0;
      if (what.size() == 8) {
        what.emplace_back("...");
        break;
      }
      what.push_back(fmt::format("{} {} rank {} ({}): {} of {} bytes, tag {:#010x}",
                                 to_string(r->kind), r->kind == RequestKind::send ? "to" : "from",
                                 r->peer, to_string(link(r->peer)), r->done, r->bytes, r->tag));
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

  std::string who(int peer) const {
    const PeerInfo& p = peers_[static_cast<std::size_t>(peer)];
    return fmt::format("rank {} (host {}, pid {})", peer, p.host, p.pid);
  }

  // ---- poisoning ---------------------------------------------------------------------

  // Called from a catch block: poisons the mesh with the exception in flight and rethrows it
  // (an unexpected one becomes Error(Internal)).
  [[noreturn]] void fail_current() {
    std::exception_ptr e = std::current_exception();
    try {
      throw;
    } catch (const Error& err) {
      // Losses and aborts are seen by every peer on its own; the rest only here.
      const bool origin = err.code() != ErrorCode::PeerLost && err.code() != ErrorCode::Aborted;
      poison(e, err.code(), err.message(), origin);
    } catch (const std::exception& ex) {
      Error err(ErrorCode::Internal,
                fmt::format("unexpected error in the transport: {}", ex.what()));
      e = std::make_exception_ptr(err);
      poison(e, err.code(), err.message(), true);
    }
    drop_all();
    std::rethrow_exception(error());
  }

  void poison(std::exception_ptr e, ErrorCode code, const std::string& message,
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

  void throw_if_poisoned() {
    if (!poisoned_.load(std::memory_order_acquire)) return;
    drop_all();
    std::rethrow_exception(error());
  }

  void drop_all() noexcept {
    for (Endpoint* ep : active_) ep->drop();
  }

  int rank_;
  MeshOptions options_;
  std::vector<PeerInfo> peers_;
  std::vector<Link> links_;
  std::vector<Control> controls_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  std::vector<Endpoint*> active_;
  std::unique_ptr<shm::Context> shm_;
  std::shared_ptr<RegionPool> regions_;
  std::vector<pollfd> pfds_;
  std::span<Request* const> waiting_;  ///< what the current wait()/test() waits for
  Clock::time_point next_control_check_{};
  bool closed_ = false;

  mutable std::mutex mu_;
  std::atomic<bool> poisoned_{false};
  std::exception_ptr error_;
  ErrorCode code_ = ErrorCode::Aborted;
  std::string message_;
  bool told_peers_ = false;
};

std::string run_id(const std::vector<RankRecord>& records) {
  std::string id = settings::get_string("TANDEM_RUN_ID");
  return id.empty() ? fmt::format("p{}", records[0].info.pid) : id;
}

}  // namespace

std::unique_ptr<Mesh> make_mesh(int rank, std::vector<PeerInfo> peers,
                                std::vector<net::Fd> controls, const EndpointMaker& make_endpoint,
                                const MeshOptions& options) {
  const int size = static_cast<int>(peers.size());
  TANDEM_CHECK_ARG(rank >= 0 && rank < size && controls.size() == peers.size(),
                   "rank {} in a group of {} ranks with {} control connections", rank, size,
                   controls.size());
  std::vector<Link> links(peers.size(), Link::tcp);
  links[static_cast<std::size_t>(rank)] = Link::self;
  auto mesh = std::make_unique<MeshImpl>(rank, options, std::move(peers), std::move(links));
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    auto ep = make_endpoint(p, mesh->failures());
    TANDEM_CHECK_ARG(ep != nullptr && ep->peer() == p && ep->link() == Link::tcp,
                     "the endpoint to rank {} must be a tcp link to that rank", p);
    mesh->attach(p, Control(std::move(controls[static_cast<std::size_t>(p)])), std::move(ep));
  }
  return mesh;
}

std::unique_ptr<Mesh> connect_mesh(store::Store& store, int rank, int size,
                                   const MeshOptions& options) {
  TANDEM_CHECK_ARG(size >= 1 && rank >= 0 && rank < size, "rank {} is not in a group of {} ranks",
                   rank, size);
  TANDEM_CHECK_ARG(options.sockets_per_peer >= 1 && options.sockets_per_peer <= tcp::kMaxStreams,
                   "TANDEM_SOCKETS_PER_PEER={} is out of range 1..{}", options.sockets_per_peer,
                   tcp::kMaxStreams);
  const auto start = Clock::now();
  const Deadline deadline = deadline_in(options.connect_timeout);
  const auto n = static_cast<std::size_t>(size);

  RankRecord self;
  TANDEM_CHECK_ARG(options.host_label.find_first_of("\r\n") == std::string::npos,
                   "host label {:?} must not contain a line break", options.host_label);
  std::string host_id = local_host_id();
  if (!options.host_label.empty()) host_id += "/label:" + options.host_label;
  self.info =
      PeerInfo{rank, net::local_host_name(), std::move(host_id), static_cast<int>(::getpid())};
  self.shm_disable = options.shm_disable;
  self.streams = options.sockets_per_peer;
  if (size == 1) {
    return std::make_unique<MeshImpl>(rank, options, std::vector<PeerInfo>{self.info},
                                      std::vector<Link>{Link::self});
  }

  testing::setup_step("start");
  tcp::Context tcp(rank, size, choose_listen_address(options.socket_ifname), options.token);
  self.address = tcp.address();
  self.port = tcp.port();
  std::vector<int> others;
  for (int p = 0; p < size; ++p)
    if (p != rank) others.push_back(p);
  const auto texts = gather(store, "addr/", rank, encode_record(self), others, deadline,
                            "addresses", options.check_peers);
  std::vector<RankRecord> records(n);
  records[static_cast<std::size_t>(rank)] = self;
  for (std::size_t i = 0; i < others.size(); ++i)
    records[static_cast<std::size_t>(others[i])] = decode_record(texts[i], others[i]);

  std::vector<Link> links(n, Link::tcp);
  std::vector<PeerInfo> peers(n);
  std::vector<tcp::Target> targets(n);
  std::vector<int> local, remote;
  for (int p = 0; p < size; ++p) {
    const RankRecord& r = records[static_cast<std::size_t>(p)];
    peers[static_cast<std::size_t>(p)] = r.info;
    if (p == rank) {
      links[static_cast<std::size_t>(p)] = Link::self;
      continue;
    }
    const bool same_host = r.info.host_id == self.info.host_id;
    const bool shm = same_host && !options.shm_disable && !r.shm_disable;
    links[static_cast<std::size_t>(p)] = shm ? Link::shm : Link::tcp;
    (shm ? local : remote).push_back(p);
    targets[static_cast<std::size_t>(p)] =
        tcp::Target{r.address, r.port, shm ? 0 : std::min(self.streams, r.streams), same_host};
  }

  auto mesh = std::make_unique<MeshImpl>(rank, options, peers, links);
  std::unique_ptr<shm::Context> shm;
  if (!local.empty()) {
    try {
      shm = std::make_unique<shm::Context>(rank, local, options.shm_buffer_bytes, run_id(records));
    } catch (const Error& e) {
      store.set(fmt::format("shm/{}", rank), "!" + e.message());  // the local peers fail fast
      throw;
    }
    const auto names = gather(store, "shm/", rank, shm->name(), local, deadline,
                              "shared-memory segment names", options.check_peers);
    for (std::size_t i = 0; i < local.size(); ++i) {
      if (names[i].starts_with('!'))
        TANDEM_THROW(ErrorCode::Io, "rank {} could not set up shared memory: {}", local[i],
                     std::string_view(names[i]).substr(1));
      shm->attach(local[i], names[i]);
    }
  }

  auto sockets = tcp.connect_all(targets, deadline, options.check_peers);
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    auto& s = sockets[static_cast<std::size_t>(p)];
    auto ep = links[static_cast<std::size_t>(p)] == Link::shm
                  ? shm->make_endpoint(p, mesh->failures())
                  : tcp.make_endpoint(p, std::move(s.data), mesh->failures());
    mesh->attach(p, Control(std::move(s.control)), std::move(ep));
  }
  if (shm) mesh->adopt_shm(std::move(shm), local);
  testing::setup_step("connected");
  TANDEM_INFO(init,
              "rank {}/{} connected in {:.1f} ms: shm to [{}], tcp to [{}] ({} stream(s) each), "
              "listening on {}",
              rank, size, std::chrono::duration<double, std::milli>(Clock::now() - start).count(),
              fmt::join(local, ","), fmt::join(remote, ","), options.sockets_per_peer,
              net::format_host_port(tcp.address(), tcp.port()));
  return mesh;
}

}  // namespace tandem::transport
