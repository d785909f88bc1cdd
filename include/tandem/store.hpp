#pragma once
/// @file store.hpp
/// The rendezvous key-value store: the only thing ranks share before they have a
/// Communicator. It carries addresses, segment names and handles, never tensor data.
/// Keys are strings, values are byte strings (std::string holds arbitrary bytes).

#include <tandem/types.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::store {

/// What Store::multi_get_or_stop() found first.
struct KeysOrStop {
  std::vector<std::string> values;  ///< every key's value, in the order asked; empty when stopped
  std::optional<std::string> stop;  ///< the stop key's value, when it was there first
};

/// Abstract store. Every blocking call has a deadline; when no deadline is given the
/// store's default timeout (see timeout()) applies. Implementations are thread-safe.
class Store {
 public:
  virtual ~Store() = default;

  /// Sets `key` to `value`, waking every waiter on that key.
  virtual void set(std::string_view key, std::string_view value) = 0;
  /// Waits until `key` exists, then returns its value. Throws Error(Timeout) at the deadline.
  virtual std::string get(std::string_view key, Deadline deadline) = 0;
  /// Atomically adds `delta` to the integer stored at `key` (absent = 0); returns the new value.
  virtual std::int64_t add(std::string_view key, std::int64_t delta) = 0;
  /// Sets `key` to `desired` if its current value equals `expected` (an absent key matches an
  /// empty `expected`). Returns the value after the operation.
  virtual std::string compare_set(std::string_view key, std::string_view expected,
                                  std::string_view desired) = 0;
  /// Waits until every key exists. Throws Error(Timeout) at the deadline, naming the missing keys.
  virtual void wait(std::span<const std::string> keys, Deadline deadline) = 0;
  /// True when every key exists (does not wait).
  virtual bool check(std::span<const std::string> keys) = 0;
  /// The values of `keys`, in order, once every one is set (as wait(), then get() each).
  /// TcpStore answers up to 4096 keys in one round trip, so a rank that reads every other
  /// rank's key makes ceil(n / 4096) requests, not n. Error(Timeout) naming the missing keys
  /// at `deadline`.
  virtual std::vector<std::string> multi_get(std::span<const std::string> keys, Deadline deadline);
  /// multi_get() that ends as soon as `stop_key` is set, returning its value instead: how a rank
  /// waits for the others' keys and still hears at once that one of them was lost (the key an
  /// ON_DISCONNECT sets). When every key and the stop key are there, the values win. An empty
  /// `stop_key` makes it multi_get(). TcpStore and HashStore answer it as one wait however long
  /// it takes (TcpStore: one request per 4096 keys); the default alternates multi_get() slices
  /// of at most `poll` with a check() of the stop key. Error(Timeout) naming the missing keys
  /// at `deadline`.
  virtual KeysOrStop multi_get_or_stop(std::span<const std::string> keys, std::string_view stop_key,
                                       Deadline deadline, std::chrono::milliseconds poll);
  /// Removes `key`; true if it existed.
  virtual bool delete_key(std::string_view key) = 0;
  /// Number of keys in the store (under this store's prefix for a PrefixStore).
  virtual std::int64_t num_keys() = 0;
  /// Number of keys that begin with `prefix` (what PrefixStore::num_keys() builds on). The
  /// stores of tandem all implement it; this default handles only the empty prefix and
  /// throws Error(InvalidArgument) otherwise.
  virtual std::int64_t num_keys_with_prefix(std::string_view prefix);
  /// Asks the store to set `key` to `value` when this client's connection to it ends without
  /// a cancel first (an empty `value` cancels): the process died, or lost the store. A key
  /// that already has a value keeps it (the first disconnect wins). This is
  /// how ranks learn that a peer died before they could connect to it. Returns false (and
  /// does nothing) for stores without connections (FileStore, HashStore); TcpStore returns
  /// true. At most 64 keys per connection.
  virtual bool set_on_disconnect(std::string_view key, std::string_view value);
  /// Requests this client has sent to its server so far (TcpStore; a PrefixStore its base's);
  /// 0 for stores without a server.
  virtual std::uint64_t requests() const noexcept { return 0; }

  /// Default timeout for the convenience overloads below (and, for a TcpStore, of the
  /// requests that take no deadline).
  std::chrono::milliseconds timeout() const noexcept { return timeout_.get(); }
  void set_timeout(std::chrono::milliseconds t) noexcept { timeout_.set(t); }
  /// Makes this store's timeout `t` itself, not a copy: a later set() of `t` (or set_timeout()
  /// here) changes both (a communicator shares its timeout with its store this way). Call it
  /// before the store is used from other threads.
  void share_timeout(SharedTimeout t) noexcept { timeout_ = std::move(t); }

  std::string get(std::string_view key) { return get(key, deadline_in(timeout())); }
  void wait(std::span<const std::string> keys) { wait(keys, deadline_in(timeout())); }

 private:
  SharedTimeout timeout_;
};

/// Options of a TcpStore client or server.
struct TcpStoreOptions {
  /// Shared secret; empty means "read TANDEM_STORE_TOKEN" (which may itself be empty only
  /// when the server was started without a token).
  std::string token;
  /// Deadline for connecting (the client retries with backoff until then).
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(60)};
  /// Default timeout of blocking operations.
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  /// Largest key or value this client sends or accepts (keep equal to the server's).
  std::size_t max_value_bytes = 64u << 20;
};

class TcpStoreServer;

/// Client of a TcpStoreServer. Connects (retrying with backoff until connect_timeout),
/// authenticates with the token, and speaks the versioned, length-prefixed store protocol.
class TcpStore final : public Store {
 public:
  TcpStore(std::string host, std::uint16_t port, TcpStoreOptions options = {});
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(std::string_view key, std::string_view value) override;
  std::string get(std::string_view key, Deadline deadline) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  std::string compare_set(std::string_view key, std::string_view expected,
                          std::string_view desired) override;
  void wait(std::span<const std::string> keys, Deadline deadline) override;
  std::vector<std::string> multi_get(std::span<const std::string> keys, Deadline deadline) override;
  KeysOrStop multi_get_or_stop(std::span<const std::string> keys, std::string_view stop_key,
                               Deadline deadline, std::chrono::milliseconds poll) override;
  std::uint64_t requests() const noexcept override;
  bool check(std::span<const std::string> keys) override;
  bool delete_key(std::string_view key) override;
  std::int64_t num_keys() override;
  std::int64_t num_keys_with_prefix(std::string_view prefix) override;
  bool set_on_disconnect(std::string_view key, std::string_view value) override;
  using Store::get;
  using Store::wait;

  const std::string& host() const noexcept;
  std::uint16_t port() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Options of a TcpStoreServer.
struct TcpStoreServerOptions {
  /// Address to bind. Default loopback; "0.0.0.0" or a host's address to accept other hosts.
  std::string bind_address = "127.0.0.1";
  /// Port to bind; 0 picks a free one (see TcpStoreServer::port()).
  std::uint16_t port = 0;
  /// Shared secret clients must present; empty means no authentication (single-host tests).
  std::string token;
  /// Largest key or value accepted, and largest frame read from the network.
  std::size_t max_value_bytes = 64u << 20;
  /// Most simultaneous client connections.
  std::size_t max_connections = 4096;
  /// A connection that has not completed a valid HELLO by then is closed (and counted in
  /// rejected_count()).
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(30)};
};

/// The store server: one thread, non-blocking sockets, epoll. Survives any bytes a client
/// sends: a malformed, oversized or unauthenticated frame closes that connection with a
/// logged reason and nothing else.
class TcpStoreServer {
 public:
  explicit TcpStoreServer(TcpStoreServerOptions options);
  /// Adopts an already bound, listening socket (e.g. from a launcher that reserved a port
  /// without a race by binding port 0 and keeping the socket).
  TcpStoreServer(int listening_fd, TcpStoreServerOptions options);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  std::uint16_t port() const noexcept;
  const std::string& bind_address() const noexcept;
  /// Connections currently open (tests).
  std::size_t connection_count() const;
  /// Connections closed because of a protocol violation or authentication failure (tests).
  std::size_t rejected_count() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// A store in a file on a shared filesystem (every rank must see the same file). Each
/// operation takes an exclusive flock and appends; waits poll the file until the deadline.
class FileStore final : public Store {
 public:
  explicit FileStore(std::string path);
  ~FileStore() override;
  FileStore(const FileStore&) = delete;
  FileStore& operator=(const FileStore&) = delete;

  void set(std::string_view key, std::string_view value) override;
  std::string get(std::string_view key, Deadline deadline) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  std::string compare_set(std::string_view key, std::string_view expected,
                          std::string_view desired) override;
  void wait(std::span<const std::string> keys, Deadline deadline) override;
  bool check(std::span<const std::string> keys) override;
  bool delete_key(std::string_view key) override;
  std::int64_t num_keys() override;
  std::int64_t num_keys_with_prefix(std::string_view prefix) override;
  using Store::get;
  using Store::wait;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Puts every key of another store under "<prefix>/", so that several communicators or
/// restart rounds can share one store without colliding.
class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);

  void set(std::string_view key, std::string_view value) override;
  std::string get(std::string_view key, Deadline deadline) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  std::string compare_set(std::string_view key, std::string_view expected,
                          std::string_view desired) override;
  void wait(std::span<const std::string> keys, Deadline deadline) override;
  std::vector<std::string> multi_get(std::span<const std::string> keys, Deadline deadline) override;
  /// Both the keys and `stop_key` are under this prefix.
  KeysOrStop multi_get_or_stop(std::span<const std::string> keys, std::string_view stop_key,
                               Deadline deadline, std::chrono::milliseconds poll) override;
  std::uint64_t requests() const noexcept override;
  bool check(std::span<const std::string> keys) override;
  bool delete_key(std::string_view key) override;
  /// Keys under this prefix only.
  std::int64_t num_keys() override;
  std::int64_t num_keys_with_prefix(std::string_view prefix) override;
  bool set_on_disconnect(std::string_view key, std::string_view value) override;
  using Store::get;
  using Store::wait;

  const std::string& prefix() const noexcept { return prefix_; }
  const std::shared_ptr<Store>& base() const noexcept { return base_; }
  /// The key `k` of this store as base() names it: "<prefix>/<k>".
  std::string base_key(std::string_view k) const;

 private:
  std::vector<std::string> base_keys(std::span<const std::string> keys) const;
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

/// An in-process store for threads-per-rank tests (thread-safe, waits with condition variables).
class HashStore final : public Store {
 public:
  HashStore();
  ~HashStore() override;
  void set(std::string_view key, std::string_view value) override;
  std::string get(std::string_view key, Deadline deadline) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  std::string compare_set(std::string_view key, std::string_view expected,
                          std::string_view desired) override;
  void wait(std::span<const std::string> keys, Deadline deadline) override;
  KeysOrStop multi_get_or_stop(std::span<const std::string> keys, std::string_view stop_key,
                               Deadline deadline, std::chrono::milliseconds poll) override;
  bool check(std::span<const std::string> keys) override;
  bool delete_key(std::string_view key) override;
  std::int64_t num_keys() override;
  std::int64_t num_keys_with_prefix(std::string_view prefix) override;
  using Store::get;
  using Store::wait;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::store
