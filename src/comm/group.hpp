#pragma once
// Who a communicator's rank is, how it reaches the store and what its settings chose: filled
// by setup/, read by the runner and the API.

#include "algorithms/algorithm.hpp"
#include "comm/choice/policy.hpp"

#include <tandem/communicator.hpp>
#include <tandem/store.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tandem::comm {

/// Who this rank is in the group.
struct Identity {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  bool is_world = true;  ///< not made by split(): sets the rank shown in log lines
};

/// The store side of the group (setup/): where its keys live and how setup waits notice a
/// rank that died.
struct Rendezvous {
  std::string prefix;                         ///< this communicator's key namespace in the store
  std::shared_ptr<store::Store> base_store;   ///< the store the caller gave
  std::shared_ptr<store::PrefixStore> store;  ///< base_store under `prefix`
  /// Key on base_store that the store server sets when a rank of this group (or of the group
  /// it was split from) disconnects without closing its communicator: setup waits watch it.
  std::string lost_key;
  bool registered_lost = false;  ///< this communicator asked the store to set lost_key
  /// Throws PeerLost once lost_key is set (store waits after setup: allocate()).
  std::function<void()> check_peers;
  /// from_env on rank 0: the store server, kept alive as long as the communicator.
  /// Declared before the mesh so that it is destroyed after it.
  std::unique_ptr<store::TcpStoreServer> server;
  std::uint64_t split_count = 0;
  std::uint64_t shrink_count = 0;
  std::uint64_t agree_count = 0;  ///< agree_lost() calls
  std::uint64_t grow_count = 0;
  /// Where processes ask to join this group (join(), grow()): the world's prefix, inherited by
  /// the communicators shrunk or grown from it; empty for split ones, which admit nobody.
  std::string join_point;
  /// The first join ticket not yet answered: the same on every rank (grow() tells them all).
  std::int64_t join_next = 1;
  bool joined = false;  ///< join() made it
  /// A communicator split from this one that this rank is in, with its members' ranks here
  /// (in its own rank order).
  struct Child {
    std::weak_ptr<Communicator> comm;
    std::vector<int> members;
  };
  /// Guards children and successor (split(), shrink() and successor() may run on different
  /// threads of the rank).
  std::mutex family_mutex;
  /// This rank's children, in the order split() made them: shrink() passes them on to the
  /// communicator it makes, shrinking each that lost a member; grow() passes them on as
  /// they are.
  std::vector<Child> children;
  /// What replaced this communicator when the one it was split from shrank without some of
  /// its members (Communicator::successor()).
  std::shared_ptr<Communicator> successor;
};

/// What the settings and options chose (setup/), read by the executor.
struct Config {
  CommOptions options;
  /// The deadline of the calls made from now on (Communicator::set_timeout() may change it
  /// while calls run on other threads).
  std::chrono::milliseconds timeout() const noexcept { return timeout_.get(); }
  void set_timeout(std::chrono::milliseconds t) noexcept { timeout_.set(t); }
  /// The timeout itself, for whatever reads it after setup (the store's waits, the monitor's
  /// stall report, the device backend): one value, which set_timeout() changes for all.
  /// MeshOptions::connect_timeout is setup's deadline only, read before set_timeout() can run.
  const SharedTimeout& shared_timeout() const noexcept { return timeout_; }
  AlgoPolicy policy;
  /// Which host each rank runs on (one host when size == 1).
  algorithms::HostLayout hosts;
  std::size_t chunk_bytes = 1u << 20;
  /// TANDEM_SPIN_US: how long the worker polls posted sends/recvs before it sleeps.
  std::chrono::nanoseconds spin_time{std::chrono::microseconds(50)};
  /// TANDEM_DEBUG=DETAIL: the ranks compare every collective call before running it.
  bool verify_calls = false;
  /// CommOptions::lazy_start: submit() wakes the worker only while it sleeps without a
  /// timeout; otherwise it polls every lazy_start.
  std::chrono::microseconds lazy_start{0};

 private:
  SharedTimeout timeout_;
};

}  // namespace tandem::comm
