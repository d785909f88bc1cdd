#pragma once
// One rendezvous round: every node's tandemrun joins round R through the store; node 0 (the
// host of the store) waits until enough nodes are there, assigns node ranks (--node-rank
// where given, else order of arrival) and global ranks (node-major, prefix sums of each
// node's worker count), picks the port its workers' rank 0 will listen on, and publishes the
// result, or an error every node prints.

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

  const NodeSlot& self() const { return nodes.at(static_cast<std::size_t>(node_rank)); }
  int nnodes() const noexcept { return static_cast<int>(nodes.size()); }
};

/// Waits until every key exists, in short slices; false at the deadline. Between slices it
/// may throw (a signal to tandemrun, a lost node, the round aborted elsewhere).
using WaitKeys = std::function<bool(const std::vector<std::string>& keys, Deadline deadline)>;

/// Joins round `round`. `want` is the node rank this node asks for (empty: any), and the round
/// closes with `min_nodes`..`max_nodes` nodes. Throws RendezvousError.
Assignment join_round(const LaunchOptions& options, Session& session, const WaitKeys& wait,
                      int round, std::optional<int> want, int min_nodes, int max_nodes);

}  // namespace tandem::tools::tandemrun
