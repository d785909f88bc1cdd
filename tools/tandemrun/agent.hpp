#pragma once
// The tandemrun of one node (torchelastic's "agent"): joins the run through the store, runs
// round after round of workers under a Supervisor, and after a failed round agrees with the
// other nodes on what happened: node 0 collects every node's report and publishes a verdict
// (restart, or exit with one failure summary), which every node follows and prints. In an
// elastic run (--nnodes MIN:MAX, MIN < MAX) a lost node (not node 0) or a node waiting to join
// leads to a new round with the nodes there are, while at least MIN are.

#include "options.hpp"
#include "records.hpp"
#include "rendezvous.hpp"
#include "session.hpp"
#include "supervisor.hpp"
#include "tools_api/net.hpp"
#include "watcher.hpp"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tandem::tools::tandemrun {

class Agent final : public RunLink {
 public:
  Agent(const LaunchOptions& options, std::string program_path);
  ~Agent() override;
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  /// Runs to the end; returns tandemrun's exit code.
  int run();

  int event_fd() const override;
  std::vector<WatchEvent> take_events() override;
  RoundEnd publish_failure(const RoundEnd& failure) override;
  RoundEnd publish_shutdown(int sig) override;
  std::optional<RoundEnd> publish_success() override;

 private:
  int run_rounds();
  // The steps of a round. Those that return an exit code end the run with it; nullopt: go on.
  /// Round 0, or (a node that joins an elastic run under way) the run's next round.
  std::optional<int> enter_run(RoundRules& rules);
  /// Joins round round_: assignment_ (perhaps not admitted() yet).
  std::optional<int> join(const RoundRules& rules);
  /// This node is in the round: the rules for the next one, and what the round is.
  void start_round(RoundRules& rules);
  /// The watcher of the other nodes, on the round's nodes.
  std::optional<int> watch();
  /// Runs the round's workers to their end.
  std::optional<int> supervise(RoundResult& result);
  /// After a failed round: the nodes agree on a verdict; a restart sets the next round's rules.
  std::optional<int> agree_on_restart(const RoundResult& r, RoundRules& rules);
  bool wait_keys(const std::vector<std::string>& keys, Deadline deadline);
  void check_interrupts();
  void start_watcher();
  bool coordinator() const { return session_ != nullptr && session_->hosts_store(); }
  Verdict coordinate_verdict(const RoundEnd& end, const NodeReport& mine);
  Verdict await_verdict();
  void fill(Verdict& v) const;
  std::string store_gone(const std::string& detail) const;
  /// Ends the run with `exit_code` (node 0 tells nodes waiting to join first).
  int finish(int exit_code);
  /// Says once that this node waits to be admitted (round `round` has `nnodes`, -1: unknown).
  void note_waiting(int round, int nnodes);
  /// The nodes this node's watcher watches in the current assignment.
  std::map<int, std::string> watched_peers() const;
  /// Says goodbye (other nodes), or waits for the others' goodbyes (node 0, whose store they
  /// still read).
  void leave();
  int cut_off_exit(const std::string& why, const NodeReport& mine);
  RoundEnd publish_end(const RoundEnd& end);

  const LaunchOptions& options_;
  std::string program_path_;
  std::string host_;
  tools_api::Fd signal_fd_;
  std::unique_ptr<Session> session_;
  std::unique_ptr<Watcher> watcher_;
  Assignment assignment_;
  int round_ = 0;
  int restarts_used_ = 0;  ///< restarts after worker failures so far
  bool waiting_ = false;   ///< not admitted yet: the run may end meanwhile
  bool noted_waiting_ = false;
  std::string abort_key_;  ///< while set, a value there ends the current wait
  std::vector<int> lost_nodes_;
  std::vector<std::string> lost_hosts_;
};

}  // namespace tandem::tools::tandemrun
