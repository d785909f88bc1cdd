#pragma once
// What the nodes of a run tell each other through the store, as JSON: how a round ended (the
// "end" of a round: success, a worker failure, a shutdown, a lost node or a node waiting to
// join an elastic run), each node's report
// on its workers once they stopped, and node 0's verdict on the round, which every node
// prints as the same failure summary.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem::tools::tandemrun {

/// How a round ended, as first published by any node (compare_set: the first one wins).
struct RoundEnd {
  enum class Kind { success, failure, shutdown, node_lost, node_joined };
  Kind kind = Kind::failure;
  int node = 0;      ///< node that published it (failure, shutdown) or that was lost (-1:
                     ///< node_joined, whose node has no rank yet)
  std::string host;  ///< that node's host name
  int rank = -1;     ///< failure: the failed worker's global rank
  std::string what;  ///< failure: "exited with code 3"; node_lost: why it counts as lost
  int signal = 0;    ///< shutdown: the signal that tandemrun received

  std::string to_json() const;
  /// Throws std::runtime_error for a malformed text.
  static RoundEnd from_json(const std::string& text);
  /// One line for the console: "rank 3 on node 1 (hostb) exited with code 3".
  std::string describe() const;
};

/// One worker as its node saw it end.
struct WorkerRecord {
  int rank = 0;
  int local_rank = 0;
  int node = 0;
  std::string host;
  int pid = -1;
  bool started = true;
  bool running = false;           ///< still running when the node gave up on it (after SIGKILL)
  int status = 0;                 ///< waitpid() status
  int signal_sent = 0;            ///< last signal tandemrun sent while it ran (0: none)
  std::int64_t exited_ms = 0;     ///< wall clock (ms since the epoch) when it was reaped
  double seconds = 0;             ///< from the start of its round to its exit
  std::vector<std::string> tail;  ///< last lines of output (failed workers only)

  /// Exited non-zero or by a signal.
  bool failed() const;
  /// Failed on its own, not because tandemrun stopped it.
  bool failed_first() const;
  /// Killed by a signal that tandemrun did not send, other than SIGABRT.
  bool killed_from_outside() const;
  /// "exited with code 3" / "was killed by SIGSEGV (11: Segmentation fault, core dumped)".
  std::string describe_status() const;
  /// The code tandemrun exits with when this worker is the root cause (128+N for signal N).
  int exit_code() const;
};

/// A node's report after its workers of a round stopped.
struct NodeReport {
  int node = 0;
  std::string host;
  int agent_pid = 0;
  std::vector<WorkerRecord> workers;

  std::string to_json() const;
  static NodeReport from_json(const std::string& text);
};

/// Node 0's decision on a round that did not succeed.
struct Verdict {
  bool restart = false;
  int exit_code = 1;
  int round = 0;
  int max_restarts = 0;
  int restarts_used = 0;  ///< restarts after worker failures so far, this one included
  /// The restart changes the nodes (a node lost while at least MIN remain, or a node waiting
  /// to join): a new rendezvous round, which does not count against --max-restarts.
  bool membership = false;
  int waiting = 0;  ///< nodes waiting to join when node 0 decided
  std::string run_id;
  std::string program;
  int nnodes = 1;
  int world_size = 0;
  RoundEnd end;                          ///< how the round ended
  std::optional<WorkerRecord> root;      ///< the worker that failed first, if any
  std::vector<int> lost_nodes;           ///< nodes that did not report
  std::vector<std::string> lost_hosts;   ///< their host names
  std::vector<NodeReport> reports;       ///< by node rank
  std::vector<std::string> collectives;  ///< what the workers' communicators reported

  std::string to_json() const;
  static Verdict from_json(const std::string& text);
};

/// What decide() may do besides exiting.
struct RestartRules {
  int max_restarts = 0;
  int restarts_used = 0;  ///< restarts after worker failures before this round's end
  int min_nodes = 1;      ///< --nnodes MIN:MAX; elastic when MIN < MAX
  int max_nodes = 1;
  int nnodes = 1;   ///< nodes in the round
  int waiting = 0;  ///< nodes waiting to join
  bool elastic() const noexcept { return min_nodes < max_nodes; }
};

/// Chooses the root cause and the action: restart while restarts remain after a worker
/// failure; in an elastic run, a new round without the lost nodes while at least MIN remain
/// (node 0, which hosts the store, excepted), or with the nodes waiting to join; exit on a
/// shutdown, a lost node otherwise, or when no restart is left.
Verdict decide(const RoundEnd& end, std::vector<NodeReport> reports, std::vector<int> lost_nodes,
               std::vector<std::string> lost_hosts, int round, const RestartRules& rules);

/// The failure summary every node prints (the same text on every node).
std::string format_summary(const Verdict& v);

/// The line printed on every node before a restart (or a new round of an elastic run).
std::string format_restart_note(const Verdict& v);

/// "SIGSEGV" for 11, "signal 42" for unnamed ones.
std::string signal_name(int sig);

/// "2025-01-31 12:00:00.123" in local time.
std::string wall_time_string(std::int64_t epoch_ms);

}  // namespace tandem::tools::tandemrun
