#pragma once
// The supervision of one round's workers on this node: one poll() over every worker pipe,
// the signalfd (SIGCHLD, SIGINT, SIGTERM, SIGHUP) and the watcher's eventfd. The first worker
// to fail here, a signal to tandemrun, or the end of the round published by another node stops
// every local worker (the signal, then SIGKILL after the grace period). The round's end is
// agreed through the RunLink (the store), and the outcome is this node's report.

#include "options.hpp"
#include "output.hpp"
#include "records.hpp"
#include "tools_api/net.hpp"
#include "tools_api/topology.hpp"
#include "watcher.hpp"

#include <tandem/types.hpp>

#include <chrono>
#include <csignal>
#include <memory>
#include <optional>
#include <poll.h>
#include <string>
#include <sys/types.h>
#include <utility>
#include <vector>

namespace tandem::tools::tandemrun {

class Session;
struct Assignment;

/// Signals tandemrun handles through its signalfd. Block them (block_signals()) before any
/// thread starts, so that every thread inherits the mask.
sigset_t handled_signals();
void block_signals();

/// How the supervisor reaches the rest of the run. Each call may throw Error when the store is
/// unusable (then the node is cut off from the run).
class RunLink {
 public:
  virtual ~RunLink() = default;
  /// Readable while take_events() has something.
  virtual int event_fd() const = 0;
  virtual std::vector<WatchEvent> take_events() = 0;
  /// Publishes a local worker failure as the round's end; returns the round's end (which is
  /// another node's when it was first).
  virtual RoundEnd publish_failure(const RoundEnd& failure) = 0;
  /// Publishes a shutdown after a signal to this tandemrun; returns the round's end.
  virtual RoundEnd publish_shutdown(int sig) = 0;
  /// Every local worker succeeded; returns the round's end once every node's did.
  virtual std::optional<RoundEnd> publish_success() = 0;
};

/// One worker as the supervisor sees it.
struct Worker {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  tools_api::Fd out_fd, err_fd;
  tools_api::Fd log_fd;
  Tail tail;
  std::unique_ptr<LineStream> out, err;

  bool running = false;
  int status = 0;       ///< waitpid status once exited
  int signal_sent = 0;  ///< last signal tandemrun sent while it ran (0: none)
  /// Killed by a signal while the others went on (--on-worker-loss continue).
  bool lost = false;
  bool replacement = false;  ///< started in a lost worker's place (--max-replacements)
  Clock::time_point exited_at{};
  std::chrono::system_clock::time_point exited_wall{};

  bool failed() const;
  /// "exited with code 3" / "was killed by SIGSEGV (11: ...)".
  std::string describe_status() const;
};

struct RoundResult {
  std::optional<RoundEnd> end;  ///< how the round ended (empty when cut off from the run)
  std::string cut_off;          ///< why this node lost the run (store gone, node 0 lost)
  int interrupted_by = 0;       ///< signal tandemrun received during the round
  NodeReport report;            ///< this node's workers
};

class Supervisor {
 public:
  Supervisor(const LaunchOptions& options, const Session& session, const Assignment& assignment,
             std::string program_path, int signal_fd, RunLink& link);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  /// Starts the workers and supervises them to the end of the round.
  RoundResult run();

 private:
  void start_workers();
  /// Starts the worker of local rank `local`; a replacement joins the running group.
  void start_worker(int local, bool replacement);
  void loop();
  /// Stopping, and the grace period is over: SIGKILL.
  void kill_if_overdue(Clock::time_point now);
  /// Whether a worker's stdout or stderr pipe is still open.
  bool output_open() const;
  /// Ends every worker's output (the last partial lines) and closes the pipes.
  void close_output();
  /// Once every worker exited 0: tells the other nodes (once).
  void report_success();
  /// Acts on what poll() found in `pfds`: the workers' output, signals, the watcher's news.
  void dispatch(const std::vector<pollfd>& pfds,
                const std::vector<std::pair<Worker*, bool>>& streams, bool prompt);
  void on_signals();
  void on_events();
  void reap();
  void on_worker_exit(Worker& w);
  /// One read of a worker's stdout or stderr; returns whether it filled the read buffer
  /// (more may be waiting).
  bool read_stream(Worker& w, bool err);
  struct OutputRead {
    bool any = false;   ///< a pipe had output (or was closed)
    bool more = false;  ///< a read filled its buffer: more may be waiting
  };
  /// Reads what the workers' pipes hold now, without waiting.
  OutputRead read_ready_output();
  /// Appends the pipes still open to `pfds`, and (worker, is stderr) for each to `streams`.
  void add_output_fds(std::vector<pollfd>& pfds,
                      std::vector<std::pair<Worker*, bool>>& streams) const;
  void stop_all(int sig);
  void cut_off(const std::string& why);
  std::string store_gone(const std::string& detail) const;
  void end_round(const RoundEnd& end);
  RoundResult result() const;

  const LaunchOptions& options_;
  const Session& session_;
  const Assignment& assignment_;
  std::string program_path_;
  int signal_fd_;
  RunLink& link_;
  std::string host_;
  std::vector<std::unique_ptr<Worker>> workers_;
  tools_api::Binding binding_;           ///< CPUs of each local rank (empty: not bound)
  int replaced_ = 0;                     ///< replacements started (--max-replacements)
  std::vector<std::string> lost_nodes_;  ///< "node N (host)" lost under --on-worker-loss continue

  Clock::time_point start_ = Clock::now();
  int running_ = 0;
  std::optional<RoundEnd> end_;
  std::string cut_off_;
  bool told_success_ = false;
  int interrupted_by_ = 0;
  bool stopping_ = false;
  bool killed_ = false;
  Deadline kill_at_ = Deadline::max();
  Deadline give_up_at_ = Deadline::max();
};

}  // namespace tandem::tools::tandemrun
