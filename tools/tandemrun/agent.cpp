#include "agent.hpp"

#include "check.hpp"
#include "culprit.hpp"
#include "output.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <set>
#include <stdexcept>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <system_error>
#include <unistd.h>

namespace tandem::tools::tandemrun {
namespace {

using namespace std::chrono_literals;

// Store waits are cut in slices so that signals and the watcher's news are seen in time.
constexpr auto kSlice = 250ms;
// How long node 0 waits for the other nodes' reports beyond their grace period, how long the
// others wait for its verdict, and how long node 0 waits for the others to leave.
constexpr auto kReportMargin = 30s;
constexpr auto kVerdictMargin = 60s;
constexpr auto kByeBound = 10s;

// A signal to tandemrun while it waited on the store.
class Interrupted : public std::runtime_error {
 public:
  explicit Interrupted(int sig) : std::runtime_error(signal_name(sig)), signal(sig) {}
  int signal;
};

// This node cannot reach the run any more (the store or node 0 is gone).
class CutOff : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The run ended while this node waited to be admitted.
class RunOver : public std::runtime_error {
 public:
  RunOver(const std::string& what, int code) : std::runtime_error(what), exit_code(code) {}
  int exit_code;
};

// Another node ended the round being joined (a shutdown, a lost node).
class RoundAborted : public std::runtime_error {
 public:
  explicit RoundAborted(RoundEnd e) : std::runtime_error(e.describe()), end(std::move(e)) {}
  RoundEnd end;
};

void note(std::string_view text) {
  write_all(2, fmt::format("tandemrun: {}\n", text));
}

double secs(std::chrono::milliseconds d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

Agent::Agent(const LaunchOptions& options, std::string program_path)
    : options_(options),
      program_path_(std::move(program_path)),
      host_(tools_api::local_host_name()) {
  const sigset_t set = handled_signals();
  signal_fd_.reset(::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!signal_fd_)
    TANDEM_THROW(ErrorCode::Io, "signalfd failed: {}", std::system_category().message(errno));
  // Processes a worker leaves behind are re-parented to tandemrun, which reaps them, rather
  // than to an init that may never do so.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
}

Agent::~Agent() {
  watcher_.reset();  // before the session's store connections go
  if (session_) session_->remove_shm_segments();
}

int Agent::run() {
  const StoreRole role = store_role(options_);
  try {
    session_ = std::make_unique<Session>(options_, role, [this] { check_interrupts(); });
  } catch (const Interrupted& i) {
    note(fmt::format("received {} while connecting to node 0's store: exiting", i.what()));
    return 128 + i.signal;
  } catch (const Error& e) {
    if (role == StoreRole::host) {
      note(fmt::format("cannot host the rendezvous store (--master-addr {}, --master-port {}): {}",
                       options_.master_addr,
                       options_.master_port == 0 ? std::string("<any free port>")
                                                 : std::to_string(options_.master_port),
                       e.message()));
    } else {
      note(e.message());
    }
    note(check_advice());
    return 1;
  }
  return run_rounds();
}

int Agent::run_rounds() {
  RoundRules rules{
      .min_nodes = options_.min_nodes, .max_nodes = options_.max_nodes, .want = options_.node_rank};
  if (const auto code = enter_run(rules)) return *code;
  for (;; ++round_) {
    if (const auto code = join(rules)) return *code;
    if (!assignment_.admitted()) {
      note_waiting(round_, assignment_.nnodes());
      waiting_ = true;
      rules.want.reset();
      continue;
    }
    start_round(rules);
    if (const auto code = watch()) return *code;
    RoundResult r;
    if (const auto code = supervise(r)) return *code;
    session_->remove_shm_segments();
    if (!r.cut_off.empty() || !r.end) return cut_off_exit(r.cut_off, r.report);
    if (r.end->kind == RoundEnd::Kind::success) return finish(0);
    if (const auto code = agree_on_restart(r, rules)) return *code;
  }
}

std::optional<int> Agent::enter_run(RoundRules& rules) {
  assignment_.node_rank = options_.node_rank.value_or(-1);
  round_ = 0;
  try {
    // A node that starts while an elastic run is under way joins its next round.
    if (options_.elastic() && !session_->hosts_store()) round_ = next_open_round(*session_);
  } catch (const std::exception& e) {
    note(fmt::format("cannot read the run's state from the store at {}: {}",
                     session_->store_address(), e.what()));
    return 1;
  }
  if (round_ > 0) {
    rules.want.reset();  // a new node: after the run's nodes
    note_waiting(round_ - 1, round_size(*session_, round_ - 1));
  }
  waiting_ = round_ > 0;
  return std::nullopt;
}

std::optional<int> Agent::join(const RoundRules& rules) {
  try {
    abort_key_ = session_->keys().end(round_);
    assignment_ = join_round(
        options_, *session_,
        [this](const std::vector<std::string>& k, Deadline d) { return wait_keys(k, d); }, round_,
        rules);
    abort_key_.clear();
  } catch (const RendezvousError& e) {
    note(e.what());
    note(check_advice());
    return 1;
  } catch (const RoundAborted& e) {
    note(fmt::format("{}: stopping", e.what()));
    return e.end.kind == RoundEnd::Kind::shutdown ? 128 + e.end.signal : 1;
  } catch (const RunOver& e) {
    note(fmt::format("the run ended ({}) before this node was admitted", e.what()));
    return e.exit_code;
  } catch (const Interrupted& i) {
    try {
      publish_shutdown(i.signal);
    } catch (const Error&) {
    }
    note(fmt::format("received {} while the nodes joined round {}: exiting", i.what(), round_));
    return 128 + i.signal;
  } catch (const CutOff& e) {
    note(e.what());
    return 1;
  } catch (const Error& e) {
    note(fmt::format("rendezvous through the store at {} failed: {}{}", session_->store_address(),
                     e.message(),
                     waiting_ ? " (the run may have ended before this node was admitted)" : ""));
    return 1;
  }
  return std::nullopt;
}

void Agent::start_round(RoundRules& rules) {
  waiting_ = false;
  rules.want = assignment_.node_rank;  // orders the next round's nodes
  if (!options_.elastic()) rules.min_nodes = rules.max_nodes = assignment_.nnodes();
  lost_nodes_.clear();
  lost_hosts_.clear();
  TANDEM_INFO(run, "tandemrun: round {}: node {} of {}, ranks {}..{} of {}", round_,
              assignment_.node_rank, assignment_.nnodes(), assignment_.self().first_rank,
              assignment_.self().first_rank + assignment_.self().nproc - 1, assignment_.world_size);
  if (options_.elastic()) {
    note(fmt::format("round {}: {} node(s), world size {}; this is node {} (ranks {}..{})", round_,
                     assignment_.nnodes(), assignment_.world_size, assignment_.node_rank,
                     assignment_.self().first_rank,
                     assignment_.self().first_rank + assignment_.self().nproc - 1));
  }
}

std::optional<int> Agent::watch() {
  try {
    if (!watcher_) {
      start_watcher();
    } else {
      watcher_->set_peers(assignment_.node_rank, watched_peers());
    }
  } catch (const Error& e) {
    note(fmt::format("cannot watch the run: {}", e.message()));
    return 1;
  }
  watcher_->watch_round(
      round_, options_.elastic() && coordinator() && assignment_.nnodes() < options_.max_nodes);
  return std::nullopt;
}

std::optional<int> Agent::supervise(RoundResult& result) {
  try {
    Supervisor supervisor(options_, *session_, assignment_, program_path_, signal_fd_.get(), *this);
    result = supervisor.run();
  } catch (const Error& e) {
    note(e.message());
    RoundEnd end;
    end.node = assignment_.node_rank;
    end.host = host_;
    end.what = fmt::format("its tandemrun failed: {}", e.message());
    try {
      publish_failure(end);
    } catch (const Error&) {
    }
    return 1;
  }
  return std::nullopt;
}

std::optional<int> Agent::agree_on_restart(const RoundResult& r, RoundRules& rules) {
  Verdict v;
  try {
    session_->store().set(session_->keys().report(round_, assignment_.node_rank),
                          r.report.to_json());
    v = coordinator() ? coordinate_verdict(*r.end, r.report) : await_verdict();
  } catch (const Interrupted& i) {
    note(fmt::format("received {} while the nodes agreed on how round {} ended: exiting", i.what(),
                     round_));
    return 128 + i.signal;
  } catch (const CutOff& e) {
    return cut_off_exit(e.what(), r.report);
  } catch (const Error& e) {
    return cut_off_exit(store_gone(e.message()), r.report);
  } catch (const std::runtime_error& e) {  // malformed records
    return cut_off_exit(e.what(), r.report);
  }
  if (!v.restart) {
    write_all(2, format_summary(v));
    return finish(v.exit_code);
  }
  restarts_used_ = v.restarts_used;
  if (options_.elastic()) {
    // Node 0 closes the next round once the remaining nodes and those waiting are in.
    rules.min_nodes = options_.min_nodes;
    rules.max_nodes = options_.max_nodes;
    rules.expected = v.nnodes - static_cast<int>(v.lost_nodes.size()) + v.waiting;
  }
  write_all(2, format_restart_note(v));
  return std::nullopt;
}

void Agent::note_waiting(int round, int nnodes) {
  if (noted_waiting_) return;
  noted_waiting_ = true;
  note(fmt::format(
      "round {} of the run is under way with {} node(s) (--nnodes {}:{}): this node waits to "
      "join the next one{}",
      round, nnodes < 0 ? std::string("?") : std::to_string(nnodes), options_.min_nodes,
      options_.max_nodes,
      nnodes < options_.max_nodes ? ", which node 0 starts for it"
                                  : ", when a place is free (the run has its MAX nodes)"));
}

std::map<int, std::string> Agent::watched_peers() const {
  std::map<int, std::string> peers;
  for (const auto& n : assignment_.nodes) {
    if (n.node == assignment_.node_rank) continue;
    if (coordinator() || n.node == 0) peers.emplace(n.node, n.host);
  }
  return peers;
}

void Agent::start_watcher() {
  watcher_ = std::make_unique<Watcher>(session_->connect(), session_->keys(), assignment_.node_rank,
                                       coordinator(), watched_peers(), options_.monitor_interval,
                                       options_.continue_on_worker_loss);
}

int Agent::event_fd() const {
  return watcher_->fd();
}

std::vector<WatchEvent> Agent::take_events() {
  auto events = watcher_->take();
  for (const auto& e : events) {
    if (e.kind != WatchEvent::Kind::node_lost) continue;
    if (std::find(lost_nodes_.begin(), lost_nodes_.end(), e.node) != lost_nodes_.end()) continue;
    lost_nodes_.push_back(e.node);
    lost_hosts_.push_back(e.host);
  }
  return events;
}

RoundEnd Agent::publish_end(const RoundEnd& end) {
  return RoundEnd::from_json(
      session_->store().compare_set(session_->keys().end(round_), "", end.to_json()));
}

RoundEnd Agent::publish_failure(const RoundEnd& failure) {
  return publish_end(failure);
}

RoundEnd Agent::publish_shutdown(int sig) {
  RoundEnd end;
  end.kind = RoundEnd::Kind::shutdown;
  end.node = assignment_.node_rank;
  end.host = host_;
  end.signal = sig;
  return publish_end(end);
}

std::optional<RoundEnd> Agent::publish_success() {
  const auto done = session_->store().add(session_->keys().done(round_), 1);
  // Nodes lost without ending the round (--on-worker-loss continue) count as done.
  const auto lost = options_.continue_on_worker_loss
                        ? session_->store().add(session_->keys().lost(round_), 0)
                        : 0;
  if (done + lost < assignment_.nnodes()) return std::nullopt;
  RoundEnd end;
  end.kind = RoundEnd::Kind::success;
  end.node = assignment_.node_rank;
  end.host = host_;
  return publish_end(end);
}

void Agent::check_interrupts() {
  signalfd_siginfo info{};
  while (::read(signal_fd_.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    const int sig = static_cast<int>(info.ssi_signo);
    if (sig != SIGCHLD) throw Interrupted(sig);
    int status = 0;
    while (::waitpid(-1, &status, WNOHANG) > 0) {
    }
  }
  if (!watcher_) return;
  for (const auto& e : take_events()) {
    if (e.kind == WatchEvent::Kind::store_lost) throw CutOff(store_gone(e.value));
    if (e.kind == WatchEvent::Kind::node_lost && e.node == 0 && !coordinator())
      throw CutOff(fmt::format("node 0 ({}) hosting the store is gone: {}", e.host, e.value));
  }
}

bool Agent::wait_keys(const std::vector<std::string>& keys, Deadline deadline) {
  store::Store& store = session_->store();
  while (true) {
    check_interrupts();
    if (!abort_key_.empty() && !lost_nodes_.empty() && !options_.elastic()) {
      // A node was lost before the round closed: end it for everyone.
      RoundEnd lost;
      lost.kind = RoundEnd::Kind::node_lost;
      lost.node = lost_nodes_.front();
      lost.host = lost_hosts_.front();
      lost.what = "its tandemrun stopped sending heartbeats";
      throw RoundAborted(RoundEnd::from_json(store.compare_set(abort_key_, "", lost.to_json())));
    }
    if (waiting_ && store.check(std::vector<std::string>{session_->keys().over()})) {
      const std::string code = store.get(session_->keys().over(), deadline_in(10s));
      // Node 0 keeps the store up until the nodes that waited have read this.
      store.set(session_->keys().over_seen(store.add(session_->keys().over_seen(0), 1)), "1");
      throw RunOver(code == "0" ? "every worker succeeded" : fmt::format("exit code {}", code),
                    code == "0" ? 0 : 1);
    }
    if (!abort_key_.empty() && store.check(std::vector<std::string>{abort_key_}))
      throw RoundAborted(RoundEnd::from_json(store.get(abort_key_, deadline_in(10s))));
    try {
      store.wait(keys, std::min(deadline, deadline_in(kSlice)));
      return true;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout) throw;
    }
    if (Clock::now() >= deadline) return false;
  }
}

std::string Agent::store_gone(const std::string& detail) const {
  return fmt::format(
      "the tandemrun on node 0 ({}) hosting the store at {} is gone ({})",
      assignment_.nodes.empty() ? options_.master_addr : assignment_.nodes.front().host,
      session_->store_address(), detail);
}

void Agent::fill(Verdict& v) const {
  v.run_id = session_->run_id();
  v.program = options_.command.front();
  v.nnodes = assignment_.nnodes();
  v.world_size = assignment_.world_size;
}

Verdict Agent::coordinate_verdict(const RoundEnd& end, const NodeReport& mine) {
  store::Store& store = session_->store();
  const Keys& keys = session_->keys();
  std::vector<NodeReport> reports{mine};
  std::set<int> pending;
  for (const auto& n : assignment_.nodes)
    if (n.node != assignment_.node_rank) pending.insert(n.node);
  const auto bound = options_.grace_period + kReportMargin;
  const Deadline deadline = deadline_in(bound);
  std::vector<int> lost;
  std::vector<std::string> lost_hosts;
  const auto mark_lost = [&](int node) {
    lost.push_back(node);
    lost_hosts.push_back(assignment_.nodes.at(static_cast<std::size_t>(node)).host);
    pending.erase(node);
  };
  while (true) {
    for (int n : lost_nodes_)
      if (pending.contains(n)) mark_lost(n);
    for (auto it = pending.begin(); it != pending.end();) {
      const std::string key = keys.report(round_, *it);
      if (store.check(std::vector<std::string>{key})) {
        reports.push_back(NodeReport::from_json(store.get(key, deadline_in(10s))));
        it = pending.erase(it);
      } else {
        ++it;
      }
    }
    if (pending.empty()) break;
    if (Clock::now() >= deadline) {
      TANDEM_WARN(run, "tandemrun: {} node(s) sent no report within {:g} s", pending.size(),
                  secs(std::chrono::duration_cast<std::chrono::milliseconds>(bound)));
      while (!pending.empty()) mark_lost(*pending.begin());
      break;
    }
    std::vector<std::string> wanted;
    wanted.reserve(pending.size());
    for (int n : pending) wanted.push_back(keys.report(round_, n));
    wait_keys(wanted, std::min(deadline, deadline_in(1s)));
  }
  // A node lost during the round, whose loss did not end it, still counts.
  for (std::size_t i = 0; i < lost_nodes_.size(); ++i) {
    if (std::find(lost.begin(), lost.end(), lost_nodes_[i]) == lost.end()) {
      lost.push_back(lost_nodes_[i]);
      lost_hosts.push_back(lost_hosts_[i]);
    }
  }
  RestartRules rules{.max_restarts = options_.max_restarts,
                     .restarts_used = restarts_used_,
                     .min_nodes = options_.min_nodes,
                     .max_nodes = options_.max_nodes,
                     .nnodes = assignment_.nnodes(),
                     .waiting = 0};
  if (rules.elastic()) {
    // Nodes that joined the next round already wait to be admitted (the others join it only
    // after this verdict).
    rules.waiting = static_cast<int>(store.add(keys.joined(round_ + 1), 0));
  }
  Verdict v =
      decide(end, std::move(reports), std::move(lost), std::move(lost_hosts), round_, rules);
  fill(v);
  try {
    v.collectives = collective_report(store, round_, assignment_.world_size, v.reports);
  } catch (const Error& e) {
    TANDEM_WARN(run, "tandemrun: could not read the workers' collective reports: {}", e.message());
  }
  store.set(keys.verdict(round_), v.to_json());
  return v;
}

Verdict Agent::await_verdict() {
  const std::string key = session_->keys().verdict(round_);
  const auto bound = options_.grace_period + kVerdictMargin;
  if (!wait_keys({key}, deadline_in(bound))) {
    throw CutOff(fmt::format("node 0 ({}) published no verdict on round {} within {:g} s",
                             assignment_.nodes.front().host, round_, secs(bound)));
  }
  return Verdict::from_json(session_->store().get(key, deadline_in(10s)));
}

int Agent::finish(int exit_code) {
  if (coordinator()) {
    try {
      // Tells nodes still waiting to join that there is nothing to join any more, and lets
      // them read it.
      store::Store& store = session_->store();
      store.set(session_->keys().over(), std::to_string(exit_code));
      const auto waiting = store.add(session_->keys().joined(round_ + 1), 0);
      std::vector<std::string> seen;
      for (std::int64_t i = 1; i <= waiting; ++i) seen.push_back(session_->keys().over_seen(i));
      if (!seen.empty() && !wait_keys(seen, deadline_in(kByeBound)))
        TANDEM_INFO(run, "tandemrun: not every waiting node read the end of the run");
    } catch (const std::exception& e) {
      TANDEM_INFO(run, "tandemrun: could not tell the waiting nodes the run ended: {}", e.what());
    }
  }
  leave();
  return exit_code;
}

void Agent::leave() {
  if (!coordinator()) {
    try {
      session_->store().set(session_->keys().bye(assignment_.node_rank), "1");
    } catch (const Error&) {
    }
    return;
  }
  // Node 0 hosts the store: it stays until the others no longer need it (they have read the
  // end of the run), or a bounded time.
  watcher_->stop_watching_peers();
  std::vector<std::string> byes;
  for (const auto& n : assignment_.nodes) {
    if (n.node == assignment_.node_rank) continue;
    if (std::find(lost_nodes_.begin(), lost_nodes_.end(), n.node) != lost_nodes_.end()) continue;
    byes.push_back(session_->keys().bye(n.node));
  }
  if (byes.empty()) return;
  try {
    if (!wait_keys(byes, deadline_in(kByeBound)))
      TANDEM_INFO(run, "tandemrun: not every node said goodbye within {} s", kByeBound.count());
  } catch (const std::exception& e) {
    TANDEM_INFO(run, "tandemrun: leaving before every node said goodbye: {}", e.what());
  }
}

int Agent::cut_off_exit(const std::string& why, const NodeReport& mine) {
  Verdict v;
  v.end.kind = RoundEnd::Kind::node_lost;
  v.end.node = 0;
  v.end.host = assignment_.nodes.empty() ? options_.master_addr : assignment_.nodes.front().host;
  v.end.what = why.empty() ? std::string("this node lost the run") : why;
  v.round = round_;
  v.reports.push_back(mine);
  v.exit_code = 1;
  fill(v);
  if (coordinator()) note(fmt::format("this node lost its own store: {}", v.end.what));
  write_all(2, format_summary(v));
  return 1;
}

}  // namespace tandem::tools::tandemrun
