#pragma once
// The mesh's implementation, private to transport, split along its seams:
//   mesh.cpp           the Mesh interface: post, test, wait, abort, close
//   mesh_wait.cpp      waiting: progress passes, spinning, sleeping on a futex or poll()
//   mesh_failures.cpp  liveness and control: peers that died, aborted or left, the
//                      poisoned state every later call rethrows
//   mesh_connect.cpp   building one: make_mesh over given connections, connect_mesh
//                      through a store
//   mesh_demand.cpp    connections made at a peer's first message

#include "transport/control.hpp"
#include "transport/cpu_spread.hpp"
#include "transport/endpoint.hpp"
#include "transport/mesh.hpp"
#include "transport/regions.hpp"
#include "transport/shm/context.hpp"
#include "transport/tcp/context.hpp"

#include <tandem/error.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <poll.h>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem::transport::detail {

using namespace std::chrono_literals;

// Longest single sleep. A death while only shared memory is waited on wakes the sleep at once
// (ControlWatch); were the watch's thread not to run, it would be noticed this fast.
inline constexpr auto kSlice = 50ms;
// Sleep slice when both shm and tcp transfers are pending: a futex and a socket cannot be
// waited on together, so the futex side is polled this often.
inline constexpr auto kMixedSlice = 1ms;
// While data keeps moving (no blocking), the control sockets are still read this often.
inline constexpr auto kControlPeriod = 1ms;
// A rank that woke a sleeping same-host peer spins at least this long in its next wait (when
// spinning is on): the peer answers only once it runs again, and a waker that gave up after
// TANDEM_SPIN_US and slept would have to be woken in turn, each rank sleeping through the
// other's wake-up, call after call. A woken vCPU may run again up to hundreds of microseconds
// later (docs/architecture.md).
inline constexpr auto kSpinAfterWake = 2ms;
// Where ranks outnumber CPUs, a waiting rank polls and yields this long before it blocks: a
// yield lets the peer it waits for run at once, while a blocked rank must be woken and
// scheduled (docs/benchmarks-small.md#waiting-spin-then-sleep).
inline constexpr auto kOversubscribedSpin = std::chrono::nanoseconds(20ms);
/// How long a normal close waits for the peers to have what this rank sent (UCX).
inline constexpr auto kFlushBound = 10s;
// After a data connection closes, how long to wait for the control connection to say why.
inline constexpr auto kCloseGrace = 200ms;

inline bool all_complete(std::span<Request* const> rs) noexcept {
  for (const Request* r : rs)
    if (!r->complete) return false;
  return true;
}

inline int poll_ms(std::chrono::nanoseconds d) noexcept {
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

  // ---- setup (mesh.cpp) ----------------------------------------------------------------
  void attach(int peer, Control control, std::unique_ptr<Endpoint> ep);
  void adopt_shm(std::unique_ptr<shm::Context> ctx, std::vector<int> local);
  /// The peers on this host, over any transport: a waiting rank that finds its CPU taken
  /// moves to its own (spread_cpu()).
  void share_host(std::span<const int> same_host);
  PeerFailureHandler& failures() noexcept { return *this; }
  /// The tcp context whose connector connects the peers not connected at setup, at their
  /// first message either way (mesh_demand.cpp). Its targets must be set for every peer.
  void adopt_tcp(std::unique_ptr<tcp::Context> tcp);

  // ---- Mesh (mesh.cpp) -----------------------------------------------------------------
  const std::shared_ptr<RegionPool>& regions() const noexcept override { return regions_; }
  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return static_cast<int>(peers_.size()); }
  Link link(int peer) const noexcept override;
  const PeerInfo& peer_info(int peer) const override;
  void post(Request& r) override;
  bool test(std::span<Request* const> rs) override;
  void wait(std::span<Request* const> rs, Deadline deadline) override;
  void transfer(std::span<Request* const> rs, Deadline deadline) override;
  int probe(std::uint32_t tag, int from) override;
  void check_alive() override;
  std::vector<int> dead_peers() noexcept override;
  void abort(const Error& error) noexcept override;
  std::exception_ptr error() const noexcept override;
  void close() noexcept override;

 private:
  /// Throws InvalidArgument for a request no transport could run (a bad peer, a null
  /// buffer, a reduction of partial elements), Internal for one still pending (debug builds).
  /// The test is inline and stores nothing; the report is out of line.
  void check_request(const Request& r) const {
    if constexpr (kCheckQueues) throw_if_pending(r);
    if (!runnable(r)) [[unlikely]]
      throw_not_runnable(r);
  }
  bool runnable(const Request& r) const noexcept {
    return static_cast<unsigned>(r.peer) < peers_.size() && r.peer != rank_ &&
           (r.bytes == 0 || (r.kind == RequestKind::send ? r.src != nullptr : r.dst != nullptr)) &&
           (r.kind != RequestKind::recv_reduce ||
            ((r.src != nullptr || r.bytes == 0) && r.bytes % dtype_size(r.dtype) == 0));
  }
  void throw_if_pending(const Request& r) const;
  [[noreturn, gnu::cold, gnu::noinline]] void throw_not_runnable(const Request& r) const;

  // ---- connections at first use (mesh_demand.cpp) -------------------------------------
  /// The endpoint of `peer`, which has none yet: one that holds the requests while the
  /// connector connects to the peer (or takes the connection the peer is making).
  [[gnu::cold, gnu::noinline]] Endpoint& connect_on_demand(int peer);
  Endpoint& endpoint(int peer) {
    Endpoint* ep = endpoints_[static_cast<std::size_t>(peer)].get();
    return ep != nullptr ? *ep : connect_on_demand(peer);
  }
  /// Advances the handshakes, attaches the peers that connected (either side dialed) and
  /// raises a peer that refused; every kLivenessPoll while this rank dials, asks
  /// check_peers. True when a peer was attached.
  bool serve_connections();
  void attach_connected(int peer, tcp::PeerSockets sockets);
  /// For messages: "connecting: ..." while `peer` is being connected, else "".
  std::string connection_status(int peer) const;

  // ---- waiting (mesh_wait.cpp) ---------------------------------------------------------
  void run_wait(std::span<Request* const> rs, Deadline deadline);
  /// One progress pass over every busy endpoint; whether anything moved.
  bool progress_all();
  /// One sleep of at most kSlice, on whatever can wake this rank. Returns at once when the
  /// look at peers that left moved data: the caller checks its requests again first.
  void block(Deadline deadline);
  [[noreturn]] void throw_timeout(std::span<Request* const> rs, Clock::time_point start);
  /// After a sched_yield() that gave this CPU away: publishes the CPU for the shm peers and
  /// moves off it when one of them waits there too, or (peers of this host over TCP only,
  /// whose CPUs cannot be seen) at once (transport/cpu_spread.hpp).
  void spread_cpu();

  // ---- liveness and control (mesh_failures.cpp) ----------------------------------------
  /// Reads what the control connections have (waiting up to `timeout_ms`), then raises a
  /// failed peer.
  void check_controls(int timeout_ms);
  void read_controls() noexcept;
  // Marks lost the shared-memory peers whose life lock the kernel released (shm::Context).
  void note_ended_peers() noexcept;
  /// Throws for a peer that died or aborted (the state stays, so every later wait that
  /// needs to block throws too). What it sent before is still delivered: a wait that can
  /// finish with the data at hand finishes. A death seen directly is reported before an
  /// abort that may only echo it.
  void raise_failed_peers();
  void raise_state(int peer);
  /// A peer that closed its mesh normally will neither send nor receive again. Its BYE was
  /// sent after everything it published, so one progress pass after reading the BYE sees
  /// all of that: only when that pass moves nothing is the peer known to owe data. Returns
  /// whether that pass moved anything (it may have completed what the caller waits for).
  bool check_left_peers();
  [[noreturn]] void throw_left(int peer);
  void raise_peer_closed(int peer, std::string_view detail) override;
  std::string who(int peer) const;

  // ---- the poisoned state (mesh_failures.cpp) ------------------------------------------
  /// Called from a catch block: poisons the mesh with the exception in flight and rethrows
  /// it (an unexpected one becomes Error(Internal)).
  [[noreturn]] void fail_current();
  void poison(std::exception_ptr e, ErrorCode code, const std::string& message, bool tell) noexcept;
  void throw_if_poisoned();
  void drop_all() noexcept;

  int rank_;
  MeshOptions options_;
  std::vector<PeerInfo> peers_;
  std::vector<Link> links_;
  std::vector<Control> controls_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  std::vector<Endpoint*> active_;
  std::unique_ptr<shm::Context> shm_;
  std::unique_ptr<ControlWatch> watch_;  ///< with shm_: wakes its sleep on control news
  std::unique_ptr<tcp::Context> tcp_;    ///< null: every peer was connected at setup
  std::vector<int> dialing_;             ///< peers whose requests wait for their connection
  Clock::time_point next_liveness_{};    ///< check_peers while dialing_ is not empty
  std::optional<CpuSpread> spread_;
  std::shared_ptr<RegionPool> regions_;
  std::vector<pollfd> pfds_;
  std::span<Request* const> waiting_;  ///< what the current wait()/test() waits for
  Clock::time_point next_control_check_{};
  std::uint64_t woken_seen_ = 0;  ///< shm_->woken() at the last wait
  bool closed_ = false;

  mutable std::mutex mu_;
  std::atomic<bool> poisoned_{false};
  std::exception_ptr error_;
  ErrorCode code_ = ErrorCode::Aborted;
  std::string message_;
  bool told_peers_ = false;
};

}  // namespace tandem::transport::detail
