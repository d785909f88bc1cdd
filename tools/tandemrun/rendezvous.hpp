#pragma once
// One rendezvous round: every node's tandemrun joins round R through the store; node 0 (the
// host of the store) waits until enough nodes are there, assigns node ranks (in round 0
// --node-rank where given, else order of arrival; in later rounds the nodes of the previous
// round keep their order and close ranks over the lost ones, new nodes come after them) and
// global ranks (node-major, prefix sums of each node's worker count), picks the port its
// workers' rank 0 will listen on, and publishes the result, or an error every node prints.
//
// A round closes as soon as MAX nodes (or the nodes node 0 expects) are there, or --rdzv-conf
// last_call_timeout after MIN were, or at --rdzv-timeout with at least MIN. A node that arrives
// after its round closed is, in an elastic run (--nnodes MIN:MAX with MIN < MAX), not admitted:
// it waits for the next round, which node 0 starts for it while the run has fewer than MAX.

#include "options.hpp"
#include "session.hpp"

#include <tandem/types.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace tandem::tools::tandemrun {

/// A rendezvous that cannot succeed: the one line every node prints.
class RendezvousError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct NodeSlot {
  int node = 0;
  std::string host;
  int nproc = 0;
  int first_rank = 0;
  int agent_pid = 0;
};

/// The outcome of a round, as node 0 published it.
struct Assignment {
  int round = 0;
  int node_rank = 0;            ///< this node
  std::vector<NodeSlot> nodes;  ///< by node rank
  int world_size = 0;
  std::string master_addr;        ///< the workers' MASTER_ADDR (node 0)
  std::uint16_t master_port = 0;  ///< the workers' MASTER_PORT (free when node 0 chose it)
  int max_restarts = 0;

  /// False for a node that arrived after the round closed (elastic runs only).
  bool admitted() const noexcept { return node_rank >= 0; }
  const NodeSlot& self() const { return nodes.at(static_cast<std::size_t>(node_rank)); }
  int nnodes() const noexcept { return static_cast<int>(nodes.size()); }
};

/// Waits until every key exists, in short slices; false at the deadline. Between slices it
/// may throw (a signal to tandemrun, a lost node, the round aborted elsewhere).
using WaitKeys = std::function<bool(const std::vector<std::string>& keys, Deadline deadline)>;

/// How a round closes, and what this node brings to it.
struct RoundRules {
  int min_nodes = 1;
  int max_nodes = 1;
  /// Node 0: the nodes it expects (the previous round's that remain, and those waiting to
  /// join); the round closes once they are all there. 0: MAX.
  int expected = 0;
  /// Round 0: the node rank this node asks for (empty: any). Later rounds: this node's rank
  /// in the previous round (empty: new), which orders the nodes.
  std::optional<int> want;
};

/// Joins round `round`. Throws RendezvousError. In an elastic run a node that arrived after
/// the round closed gets an assignment that is not admitted(), with the round's nodes.
Assignment join_round(const LaunchOptions& options, Session& session, const WaitKeys& wait,
                      int round, const RoundRules& rules);

/// The number of nodes round `round` closed with; -1 when it is not closed (or failed).
int round_size(Session& session, int round);

/// The round a node that starts now joins: the one after the last closed round (0 if none).
int next_open_round(Session& session);

}  // namespace tandem::tools::tandemrun
