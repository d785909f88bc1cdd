#pragma once
// The data of a TcpStoreServer and its waiters, apart from any socket: requests go in as
// decoded messages, replies come out addressed to connection ids. The server thread is
// its only user, so nothing here locks.

#include "store/protocol.hpp"

#include <tandem/types.hpp>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tandem::store {

class KvState {
 public:
  struct Outcome {
    enum class Kind : std::uint8_t { reply, waiting, violation };
    Kind kind = Kind::reply;
    proto::Message reply;  ///< when kind == reply
    std::string reason;    ///< when kind == violation (the connection must be closed)
  };
  /// A reply for a connection whose GET/WAIT finished (satisfied or timed out).
  using Delivery = std::pair<std::uint64_t, proto::Message>;

  /// Handles one request of an authenticated connection. GET/WAIT/MULTI_GET(_OR_STOP) on
  /// missing keys register a waiter (at most one per connection) and return Kind::waiting.
  Outcome handle(std::uint64_t conn, proto::Message&& request);

  /// Replies for waiters completed by the mutations since the last call.
  std::vector<Delivery> take_ready();
  /// TIMEOUT replies for waiters whose deadline is at or before `now`.
  std::vector<Delivery> expire(Deadline now);
  /// The nearest waiter deadline, if any.
  std::optional<Deadline> next_deadline() const;
  /// Forgets the waiter of a closed connection and performs the SETs it registered with
  /// ON_DISCONNECT (their waiters' replies come from take_ready()).
  void drop(std::uint64_t conn);

  /// ON_DISCONNECT registrations one connection may hold.
  static constexpr std::size_t kMaxOnDisconnect = 64;
  /// The values one MULTI_GET reply may carry, in bytes (within a client's default payload
  /// limit); a larger read is answered with an error.
  static constexpr std::size_t kMaxValuesBytes = std::size_t{64} << 20;

  std::size_t size() const noexcept { return map_.size(); }
  std::size_t waiter_count() const noexcept { return waiters_.size(); }

 private:
  struct Waiter {
    proto::Type type = proto::Type::wait;
    std::vector<std::string> keys;
    /// MULTI_GET_OR_STOP: writing this key ends the wait with its value (empty: none).
    std::string stop_key;
    Deadline deadline = Deadline::max();
    /// Keys it is registered on (waiting_on_) that have not been written since: only when
    /// none is left are all its keys looked up again, so that n waiters on n keys cost O(n^2)
    /// lookups in all, not O(n^3).
    std::size_t pending = 0;
  };

  const std::string* find(const std::string& key) const;
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;
  /// Registers `w` on each of its keys that is missing and sets w.pending to their number (its
  /// stop key is registered once, by handle(), and not counted).
  void register_on_missing(std::uint64_t conn, Waiter& w);
  void unregister(std::uint64_t conn, const Waiter& w);
  void wrote(const std::string& key);
  proto::Message completion(const Waiter& w) const;

  std::unordered_map<std::string, std::string> map_;
  std::unordered_map<std::uint64_t, Waiter> waiters_;
  std::unordered_map<std::string, std::vector<std::uint64_t>> waiting_on_;  // key -> conns
  std::set<std::pair<Deadline, std::uint64_t>> deadlines_;
  std::vector<Delivery> ready_;
  /// conn -> the (key, value) pairs to set when it closes.
  std::unordered_map<std::uint64_t, std::vector<std::pair<std::string, std::string>>> on_drop_;
};

}  // namespace tandem::store
