#pragma once
// The handshake that connects every pair of ranks, as one small state machine per
// connection. Rank i connects to every j > i (Outgoing) and accepts every j < i (Incoming);
// each connection (the control connection, then one per data stream) opens with a HELLO both
// ways that carries the shared token, so a stranger or a rank of another job is turned away.
//
//   Outgoing: waiting --(retry time)--> connecting --> writing --> reading --> done
//                ^-------- any failure, after a backoff (10 ms doubling to 1 s) --'
//   Incoming: accepted --> reading --(valid HELLO)--> writing --> kept
//                            `--(invalid HELLO, EOF, error)--> dropped

#include "core/net.hpp"
#include "transport/tcp/context.hpp"
#include "transport/tcp/wire.hpp"

#include <tandem/types.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
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

/// A connection this rank opens to a higher rank, retried until the deadline.
struct Outgoing {
  enum class State { waiting, connecting, writing, reading, done };
  State state = State::waiting;
  int peer = -1;
  int purpose = 0;    ///< kControlPurpose or 1 + data stream
  std::string where;  ///< host:port, for messages
  Hello hello;
  Clock::time_point retry_at{};
  std::chrono::milliseconds backoff{};
  std::string last_error = "not attempted yet";
  std::size_t next_address = 0;  ///< round robin over the peer's resolved addresses
};

/// A connection a lower rank opened to this one.
struct Incoming {
  enum class State { reading, writing };
  State state = State::reading;
  std::string where;  ///< the peer's address, for messages
  Hello hello;
};

class Connector {
 public:
  /// `targets` as for Context::connect_all; `rejected` counts connections turned away.
  Connector(int rank, int size, std::string_view token, const net::Fd& listener,
            const std::vector<Target>& targets, std::size_t& rejected);

  /// Runs every handshake to the end. Throws Error(Timeout) at `deadline` naming every
  /// connection still missing and why; `check_peers` as for Context::connect_all.
  std::vector<PeerSockets> run(Deadline deadline, const std::function<void()>& check_peers);

 private:
  int rank_;
  int size_;
  std::string_view token_;
  const net::Fd& listener_;
  const std::vector<Target>& targets_;
  std::size_t& rejected_;

  std::vector<PeerSockets> result_;
  std::vector<std::vector<net::SockAddr>> addresses_;  ///< per higher rank
  std::vector<Outgoing> outgoing_;
  std::vector<Incoming> incoming_;
  std::size_t incoming_expected_ = 0;
  std::map<std::pair<int, int>, net::Fd> accepted_;  ///< (rank, purpose) -> socket

  bool finished() const noexcept;
  /// Starts the attempts whose retry time has come; returns the earliest retry time left.
  Clock::time_point start_due(Clock::time_point now, Clock::time_point wake);
  void start(Outgoing& o);
  void fail(Outgoing& o, std::string why);
  void step(Outgoing& o);
  /// False once the connection is finished with (accepted or dropped).
  bool step(Incoming& in);
  /// The reason to turn `in`'s valid-looking HELLO away ("" to accept it).
  std::string refusal(const Incoming& in) const;
  void accept_new();
  /// Polls every socket in the handshake until `wake`, then steps the ready ones.
  void poll_until(Clock::time_point wake);
  [[noreturn]] void throw_missing(Clock::time_point start) const;
  PeerSockets& sockets(int peer) { return result_[static_cast<std::size_t>(peer)]; }
  static net::Fd& slot(PeerSockets& ps, int purpose);
};

}  // namespace tandem::transport::tcp
