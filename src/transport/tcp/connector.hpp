#pragma once
// The handshakes of one rank's tcp connections, for the life of its mesh. Each connection to a
// peer (the control connection, then one per data stream) opens with a HELLO both ways that
// carries the shared token, so a stranger or a rank of another job is turned away.
//
// Who dials. At setup, of two ranks that connect, the lower one. Later, either rank, at its
// first message to the other (dial()). When both dial at once the lower rank's connection is
// kept: the higher rank answers the lower one's HELLOs, and the lower one answers the higher
// one's with SUPERSEDED, which makes it wait for the lower rank's connection (and dial again
// after kRedial, should that never come). A rank decides at the first HELLO of a peer and keeps
// that decision for all of the peer's streams, so both sides always agree on one connection.
//
//   Outgoing: waiting --(retry time)--> connecting --> writing --> reading --> done
//                ^-------- any failure, after a backoff (10 ms doubling to 1 s) --'
//                          SUPERSEDED: the peer's own connection is coming; dropped
//   Incoming: accepted --> reading --(valid HELLO)--> writing --> kept (or SUPERSEDED, dropped)
//                            `--(invalid HELLO, EOF, error)--> dropped
//
// Non-blocking throughout: setup runs connect() until its peers are up; the mesh calls step()
// while it waits, so a peer's first message finds its connection made.

#include "core/net.hpp"
#include "transport/tcp/context.hpp"
#include "transport/tcp/wire.hpp"

#include <tandem/types.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem::transport::tcp {

/// One side of a HELLO exchange on a non-blocking socket. Reads take exactly the HELLO's
/// bytes: data may follow it immediately.
struct Hello {
  net::Fd fd;
  std::string out;  ///< the HELLO to send
  std::size_t out_done = 0;
  HelloHead head{};  ///< valid once read() returned true
  std::array<std::byte, sizeof(HelloHead) + kMaxTokenBytes> in{};
  std::size_t in_done = 0;

  /// True once the peer's HELLO is complete (or malformed enough to reject). Otherwise
  /// errno in *err (0: try again later; -1: EOF).
  bool read(int* err);
  /// True once `out` is written; otherwise errno in *err (0: try again later).
  bool write(int* err);
  std::string_view token() const noexcept;
};

/// A connection this rank opens, retried until it is done or no longer wanted.
struct Outgoing {
  enum class State { waiting, connecting, writing, reading, done };
  State state = State::waiting;
  int peer = -1;
  int purpose = 0;  ///< kControlPurpose or 1 + data stream
  Hello hello;
  Clock::time_point retry_at{};
  std::chrono::milliseconds backoff{};
};

/// A connection another rank opened to this one.
struct Incoming {
  enum class State { reading, writing };
  State state = State::reading;
  std::string where;  ///< the peer's address, for messages
  Hello hello;
  bool keep = true;    ///< false: the answer is SUPERSEDED, and the socket is closed after it
  bool stale = false;  ///< turned away as a dial its peer cancelled (not counted as rejected)
};

class Connector {
 public:
  /// When a peer that answered SUPERSEDED has not connected after this long, dial it again.
  static constexpr std::chrono::seconds kRedial{1};

  /// `listener` must be non-blocking; `rejected` counts connections turned away.
  Connector(int rank, int size, std::string_view token, const net::Fd& listener,
            std::size_t& rejected);

  /// How to reach `peer`; needed before dial(), and to complete a connection it opened.
  void set_target(int peer, const Target& target);
  /// Starts connecting to `peer`, unless its connection is made or being made already.
  void dial(int peer);
  /// Accepts new connections and advances every handshake, without blocking. True when
  /// anything changed (a peer connected, a handshake moved).
  bool step();
  /// poll() entries for step(): the listener and every handshake in flight.
  void add_poll_fds(std::vector<pollfd>& out) const;
  /// The peers whose connections all completed since the last call, with their sockets.
  std::vector<std::pair<int, PeerSockets>> take_connected();

  /// Whether a handshake with `peer` is under way (dialing it, or waiting for it to dial).
  bool connecting(int peer) const noexcept;
  /// Whether `peer` refused a connection (no listener: it exited or closed its mesh), set by
  /// dials once refusal_is_final() was called.
  bool refused(int peer) const noexcept { return at(peer).refused; }
  /// From now on a refused connection means the peer is gone: every rank's listener was up
  /// before any rank could dial it, and it closes only with the peer's mesh.
  void refusal_is_final() noexcept { refusal_final_ = true; }
  /// Why `peer` is not connected yet, for messages.
  std::string status(int peer) const;

  /// Connects `peers`: dials those above this rank, waits for those below to dial (as setup
  /// does on both sides), and dials those below too whose connection has not begun within
  /// kLivenessPoll (the lower rank's connection is still the one kept when both arrive).
  /// Returns their sockets in the order of `peers`. Throws Error(Timeout) at `deadline` naming
  /// the connections still missing and why; `check_peers` (when set) runs after a dial failed
  /// (refused or reset: most likely the peer died) and throws when a rank is gone.
  std::vector<PeerSockets> connect(std::span<const int> peers, Deadline deadline,
                                   const std::function<void()>& check_peers);

 private:
  enum class Phase : std::uint8_t {
    idle,       ///< nothing under way
    dialing,    ///< this rank's Outgoings are out
    awaiting,   ///< SUPERSEDED: the lower peer's connection is coming
    incoming,   ///< the peer's connections are being accepted
    connected,  ///< handed out by take_connected()
  };
  struct Peer {
    Target target;
    bool known = false;  ///< target set
    bool refused = false;
    Phase phase = Phase::idle;
    PeerSockets sockets;  ///< filled as connections complete (data sized once known)
    /// (purpose, socket) accepted before the target was known (a peer that finished setup
    /// first and connected at its first message)
    std::vector<std::pair<int, net::Fd>> early;
    int missing = 0;  ///< connections still to complete (valid when known)
    Clock::time_point redial_at{};
    std::string last_error = "not attempted yet";
  };

  int rank_;
  int size_;
  std::string_view token_;
  const net::Fd& listener_;
  std::size_t& rejected_;
  bool refusal_final_ = false;
  std::uint64_t failed_dials_ = 0;  ///< fail() calls so far
  std::vector<Peer> peers_;
  std::vector<std::vector<net::SockAddr>> addresses_;  ///< resolved on the first dial
  std::vector<std::size_t> next_address_;
  std::vector<Outgoing> outgoing_;
  std::vector<Incoming> incoming_;
  std::vector<int> awaiting_;  ///< peers in Phase::awaiting (redial timers)
  std::vector<int> ready_;     ///< complete, not yet taken

  Peer& at(int peer) { return peers_[static_cast<std::size_t>(peer)]; }
  const Peer& at(int peer) const { return peers_[static_cast<std::size_t>(peer)]; }
  void open(int peer);
  /// One poll() of every handshake for up to `timeout_ms`, then a step of the ready ones.
  bool pump(int timeout_ms);
  /// Starts the attempts whose retry time has come; returns the earliest retry time left.
  Clock::time_point start_due(Clock::time_point now, Clock::time_point wake);
  void start(Outgoing& o);
  void fail(Outgoing& o, int err, std::string why);
  /// Whether `o` is finished with (done, or dropped).
  bool step(Outgoing& o);
  void superseded(int peer);
  /// False once the connection is finished with (kept or dropped).
  bool step(Incoming& in);
  /// The reason to turn `in`'s valid-looking HELLO away ("" to accept it); sets in.keep.
  std::string decide(Incoming& in);
  /// Files a completed connection; `tune`: set its socket options (accepted ones).
  void keep(int peer, int purpose, net::Fd fd, bool tune);
  void cancel_dials(int peer);
  void accept_new();
  [[noreturn]] void throw_missing(std::span<const int> peers, Clock::time_point start) const;
};

}  // namespace tandem::transport::tcp
