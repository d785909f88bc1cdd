#pragma once
// The watcher thread of a tandemrun: over its own store connection it writes this node's
// heartbeat every --monitor-interval, watches the heartbeats of the other nodes (node 0
// watches everyone, the others watch node 0), and blocks in the store's wait() on the end key
// of the current round. In an elastic run node 0's watcher also sees nodes waiting to join the
// next round and ends the current one for them. What it sees becomes events, signalled through
// an eventfd that the supervisor polls with everything else.

#include "session.hpp"
#include "tools_api/net.hpp"

#include <tandem/store.hpp>
#include <tandem/types.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace tandem::tools::tandemrun {

struct WatchEvent {
  enum class Kind { end, store_lost, node_lost };
  Kind kind = Kind::end;
  int round = -1;     ///< end: the round that ended
  std::string value;  ///< end: the RoundEnd JSON; store_lost, node_lost: why
  int node = -1;      ///< node_lost
  std::string host;   ///< node_lost
};

class Watcher {
 public:
  /// `peers`: node rank -> host name of the nodes to watch. `coordinator`: this is node 0,
  /// which also ends the current round when a peer is lost, unless `go_on` (--on-worker-loss
  /// continue): then the round goes on without the lost node, which counts as done
  /// (Keys::lost), and node 0 ends it with success once every other node is done.
  Watcher(std::unique_ptr<store::Store> store, Keys keys, int node, bool coordinator,
          const std::map<int, std::string>& peers, std::chrono::milliseconds interval,
          bool go_on = false);
  ~Watcher();
  Watcher(const Watcher&) = delete;
  Watcher& operator=(const Watcher&) = delete;

  /// Readable while events are pending.
  int fd() const noexcept { return event_fd_.get(); }
  /// Takes the pending events.
  std::vector<WatchEvent> take();
  /// Starts watching the end key of `round`. `admit` (node 0 of an elastic run with fewer than
  /// MAX nodes): a node that joins round + 1 ends `round` (RoundEnd::Kind::node_joined).
  void watch_round(int round, bool admit = false);
  /// This node's rank and the nodes to watch from now on (after a round with other nodes), as
  /// in the constructor.
  void set_peers(int node, const std::map<int, std::string>& peers);
  /// Stops watching the heartbeats of other nodes (they may leave now).
  void stop_watching_peers();

  /// How long a node's heartbeat may stand still before it counts as lost.
  std::chrono::milliseconds lost_after() const noexcept { return lost_after_; }

 private:
  void loop();
  void check_peers();
  void check_waiting(int round);
  void apply_peers(const std::map<int, std::string>& peers);
  void post(WatchEvent e);

  std::unique_ptr<store::Store> store_;
  Keys keys_;
  int node_;  // watcher thread only (after construction)
  bool coordinator_;
  bool go_on_;
  std::chrono::milliseconds interval_;
  std::chrono::milliseconds lost_after_;

  struct Peer {
    std::string host;
    std::int64_t beats = -1;
    Clock::time_point changed{};
    bool lost = false;
  };
  std::map<int, Peer> peers_;  // watcher thread only

  tools_api::Fd event_fd_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<WatchEvent> events_;
  bool stop_ = false;
  bool watch_peers_ = true;
  int round_ = -1;      // the round whose end key is watched
  bool admit_ = false;  // end round_ for a node waiting to join round_ + 1
  std::optional<std::pair<int, std::map<int, std::string>>> new_peers_;
  int reported_round_ = -1;  // the last round whose end was posted (watcher thread)
  std::thread thread_;
};

}  // namespace tandem::tools::tandemrun
