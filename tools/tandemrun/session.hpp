#pragma once
// What one tandemrun shares with the whole run: the store token, the rendezvous store (hosted
// here on node 0, reached as a client everywhere), the run id all nodes agree on, the store
// keys of the run, and the clean-up of what the run leaves on this host.

#include "options.hpp"
#include "tools_api/net.hpp"

#include <tandem/store.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tandem::tools::tandemrun {

struct Assignment;

/// `n` random bytes from /dev/urandom as 2n lowercase hex characters.
std::string random_hex(std::size_t n);

/// The store keys of one run, all under "rdzv/<run id>/".
struct Keys {
  std::string base;

  std::string round(int r) const;
  std::string joined(int r) const;             ///< arrival counter
  std::string node(int r, int arrival) const;  ///< what the n-th arrival says about itself
  std::string closed(int r) const;             ///< node 0's assignment (or error) for round r
  std::string current() const;                 ///< the last round node 0 closed
  std::string end(int r) const;                ///< how round r ended (first writer wins)
  std::string done(int r) const;               ///< nodes whose workers all succeeded
  /// Nodes lost in round r that did not end it (--on-worker-loss continue): they count as done.
  std::string lost(int r) const;
  std::string report(int r, int node) const;  ///< a node's report once its workers stopped
  std::string verdict(int r) const;           ///< node 0's decision after a failed round
  std::string heartbeat(int node) const;
  std::string bye(int node) const;  ///< a node leaving after success
  std::string over() const;         ///< the run's exit code, once node 0 decided it
  /// Set by the n-th waiting node that read over() (n >= 1); n = 0: the counter of them.
  std::string over_seen(std::int64_t n) const;
};

/// Raises this process's soft limit of open files to `want` (at most the hard limit), which its
/// workers inherit; warns when the hard limit is lower.
void raise_fd_limit(std::size_t want);

/// Whether this tandemrun hosts the store: yes, no, or "if it can bind --master-addr" (a
/// multi-node run without --node-rank, where the host of --master-addr is node 0).
enum class StoreRole { host, client, try_host };

/// This node's part in hosting the store: one node hosts it; with several, node 0 (when
/// --node-rank says so) hosts and the others connect; without a node rank, try.
StoreRole store_role(const LaunchOptions& options) noexcept;

class Session {
 public:
  /// Hosts the store (role host: throws Error naming the address when it cannot), connects to
  /// it (retrying until --rdzv-timeout; `interrupted` is called between attempts and may
  /// throw), and agrees on the run id with node 0.
  Session(const LaunchOptions& options, StoreRole role, const std::function<void()>& interrupted);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const std::string& run_id() const noexcept { return run_id_; }
  const std::string& token() const noexcept { return token_; }
  const Keys& keys() const noexcept { return keys_; }
  bool hosts_store() const noexcept { return server_ != nullptr; }
  /// "host:port" of the rendezvous store (the workers' TANDEM_STORE_ADDR).
  std::string store_address() const;
  /// This tandemrun's own connection (use from one thread).
  store::TcpStore& store() noexcept { return *client_; }
  /// A further connection (for another thread).
  std::unique_ptr<store::TcpStore> connect() const;

  /// The complete environment of local worker `local_rank` in a round.
  std::vector<std::string> worker_env(const Assignment& a, int local_rank) const;
  /// Keeps the reservation of the workers' MASTER_PORT (node 0) until the next one.
  void hold_worker_port(tools_api::Fd fd) { worker_port_ = std::move(fd); }

  /// Creates LOG_DIR/RUN_ID/ and returns the path of rank `rank`'s log file there, or with
  /// --log_dir (Paddle's layout) DIR/workerlog.<local_rank>; empty without either. Throws
  /// Error(Io) naming the directory.
  std::string log_path(int rank, int local_rank) const;

  /// Removes /dev/shm/tandem-RUN_ID-* segments; returns how many were removed.
  int remove_shm_segments() const;

 private:
  /// The variables Paddle's launcher sets, appended to `set`.
  void add_paddle_env(const Assignment& a, int local_rank,
                      std::vector<std::pair<std::string_view, std::string>>& set) const;
  void start_server(bool must);
  void connect_client(const std::function<void()>& interrupted);
  void agree_on_run_id();

  const LaunchOptions& options_;
  std::string run_id_;
  std::string token_;
  std::uint16_t port_ = 0;
  tools_api::Fd worker_port_;
  Keys keys_;
  std::unique_ptr<store::TcpStoreServer> server_;
  std::unique_ptr<store::TcpStore> client_;
};

}  // namespace tandem::tools::tandemrun
