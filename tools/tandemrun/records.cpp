#include "records.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <signal.h>
#include <stdexcept>
#include <sys/wait.h>

namespace tandem::tools::tandemrun {
namespace {

using nlohmann::json;

const char* kind_name(RoundEnd::Kind k) {
  switch (k) {
    case RoundEnd::Kind::success:
      return "success";
    case RoundEnd::Kind::failure:
      return "failure";
    case RoundEnd::Kind::shutdown:
      return "shutdown";
    case RoundEnd::Kind::node_lost:
      return "node_lost";
    case RoundEnd::Kind::node_joined:
      return "node_joined";
  }
  return "failure";
}

RoundEnd::Kind kind_of(const std::string& s) {
  for (auto k : {RoundEnd::Kind::success, RoundEnd::Kind::failure, RoundEnd::Kind::shutdown,
                 RoundEnd::Kind::node_lost, RoundEnd::Kind::node_joined}) {
    if (s == kind_name(k)) return k;
  }
  throw std::runtime_error(fmt::format("unknown round end '{}'", s));
}

json end_json(const RoundEnd& e) {
  return json{{"kind", kind_name(e.kind)},
              {"node", e.node},
              {"host", e.host},
              {"rank", e.rank},
              {"what", e.what},
              {"signal", e.signal}};
}

RoundEnd end_from(const json& j) {
  RoundEnd e;
  e.kind = kind_of(j.at("kind").get<std::string>());
  e.node = j.at("node").get<int>();
  e.host = j.at("host").get<std::string>();
  e.rank = j.at("rank").get<int>();
  e.what = j.at("what").get<std::string>();
  e.signal = j.at("signal").get<int>();
  return e;
}

json worker_json(const WorkerRecord& w) {
  return json{{"rank", w.rank},
              {"local_rank", w.local_rank},
              {"node", w.node},
              {"host", w.host},
              {"pid", w.pid},
              {"started", w.started},
              {"running", w.running},
              {"status", w.status},
              {"signal_sent", w.signal_sent},
              {"exited_ms", w.exited_ms},
              {"seconds", w.seconds},
              {"tail", w.tail}};
}

WorkerRecord worker_from(const json& j) {
  WorkerRecord w;
  w.rank = j.at("rank").get<int>();
  w.local_rank = j.at("local_rank").get<int>();
  w.node = j.at("node").get<int>();
  w.host = j.at("host").get<std::string>();
  w.pid = j.at("pid").get<int>();
  w.started = j.at("started").get<bool>();
  w.running = j.at("running").get<bool>();
  w.status = j.at("status").get<int>();
  w.signal_sent = j.at("signal_sent").get<int>();
  w.exited_ms = j.at("exited_ms").get<std::int64_t>();
  w.seconds = j.at("seconds").get<double>();
  w.tail = j.at("tail").get<std::vector<std::string>>();
  return w;
}

json report_json(const NodeReport& r) {
  json workers = json::array();
  for (const auto& w : r.workers) workers.push_back(worker_json(w));
  return json{{"node", r.node}, {"host", r.host}, {"agent_pid", r.agent_pid}, {"workers", workers}};
}

NodeReport report_from(const json& j) {
  NodeReport r;
  r.node = j.at("node").get<int>();
  r.host = j.at("host").get<std::string>();
  r.agent_pid = j.at("agent_pid").get<int>();
  for (const auto& w : j.at("workers")) r.workers.push_back(worker_from(w));
  return r;
}

template <class F>
auto parse(const std::string& text, const char* what, F&& f) {
  try {
    return f(json::parse(text));
  } catch (const json::exception& e) {
    throw std::runtime_error(fmt::format("malformed {} from another node: {}", what, e.what()));
  }
}

// "rank 3" or "rank 3 on node 1 (hostb)": where a worker ran, for multi-node runs.
std::string where(const WorkerRecord& w, bool multi_node) {
  return multi_node ? fmt::format("rank {} on node {} ({})", w.rank, w.node, w.host)
                    : fmt::format("rank {}", w.rank);
}

void append_root(std::string& s, const WorkerRecord& w, bool multi_node) {
  s += multi_node ? fmt::format("  rank      : {} (local_rank {} on node {})\n", w.rank,
                                w.local_rank, w.node)
                  : fmt::format("  rank      : {} (local_rank {})\n", w.rank, w.local_rank);
  s += fmt::format("  host      : {}\n", w.host);
  s += fmt::format("  pid       : {}\n", w.pid);
  if (!w.running && WIFSIGNALED(w.status))
    s +=
        fmt::format("  signal    : {} ({})\n", signal_name(WTERMSIG(w.status)), WTERMSIG(w.status));
  s += fmt::format("  status    : {}\n", w.describe_status());
  s += fmt::format("  exit code : {}\n", w.exit_code());
  s += fmt::format("  time      : {} ({:.1f} s after start)\n", wall_time_string(w.exited_ms),
                   w.seconds);
  if (w.tail.empty()) {
    s += "  output    : (none)\n";
  } else {
    s += fmt::format("  output    : last {} line(s)\n", w.tail.size());
    for (const auto& line : w.tail) s += fmt::format("    [rank {}]: {}\n", w.rank, line);
  }
}

void append_worker_line(std::string& s, const WorkerRecord& w, bool multi_node) {
  s += multi_node ? fmt::format("  rank {} (pid {}, node {} {}): ", w.rank, w.pid, w.node, w.host)
                  : fmt::format("  rank {} (pid {}): ", w.rank, w.pid);
  if (!w.started) {
    s += "not started\n";
  } else if (w.running) {
    s += "did not exit after SIGKILL\n";
  } else if (w.failed_first()) {
    s += fmt::format("also failed ({:.1f} s after start): {}\n", w.seconds, w.describe_status());
  } else if (w.signal_sent != 0) {
    s += fmt::format("stopped by tandemrun with {}; {}\n", signal_name(w.signal_sent),
                     w.describe_status());
  } else {
    s += fmt::format("{}\n", w.describe_status());
  }
}

// The root cause: the earliest worker that failed on its own; ties go to the lower rank.
// Workers killed by a signal from outside (SIGKILL, SIGSEGV, ...; not SIGABRT, which is
// how an uncaught exception ends) win over non-zero exits up to kHardDeathLead later: when
// a rank is killed, its peers notice the lost connection and exit within milliseconds,
// often before anyone has reaped the killed one.
const WorkerRecord* root_cause(const std::vector<NodeReport>& reports, RoundEnd::Kind kind) {
  constexpr std::int64_t kHardDeathLead = 500;
  std::vector<const WorkerRecord*> candidates;
  for (bool own_only : {true, false}) {
    if (!own_only && kind != RoundEnd::Kind::failure) break;
    for (const auto& r : reports) {
      for (const auto& w : r.workers) {
        if (own_only ? w.failed_first() : (w.failed() && !w.running)) candidates.push_back(&w);
      }
    }
    if (!candidates.empty()) break;
  }
  const auto earlier = [](const WorkerRecord* a, const WorkerRecord* b) {
    return a->exited_ms != b->exited_ms ? a->exited_ms < b->exited_ms : a->rank < b->rank;
  };
  if (candidates.empty()) return nullptr;
  const WorkerRecord* best = *std::min_element(candidates.begin(), candidates.end(), earlier);
  const WorkerRecord* hard = nullptr;
  for (const WorkerRecord* w : candidates) {
    if (w->killed_from_outside() && w->exited_ms <= best->exited_ms + kHardDeathLead &&
        (hard == nullptr || earlier(w, hard)))
      hard = w;
  }
  return hard != nullptr ? hard : best;
}

}  // namespace

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", sig);
}

std::string wall_time_string(std::int64_t epoch_ms) {
  const std::time_t tt = static_cast<std::time_t>(epoch_ms / 1000);
  std::tm tm{};
  ::localtime_r(&tt, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return fmt::format("{}.{:03d}", buf, static_cast<int>(epoch_ms % 1000));
}

std::string RoundEnd::to_json() const {
  return end_json(*this).dump();
}

RoundEnd RoundEnd::from_json(const std::string& text) {
  return parse(text, "round end", end_from);
}

std::string RoundEnd::describe() const {
  const std::string where =
      node >= 0 ? fmt::format("node {} ({})", node, host) : fmt::format("a node ({})", host);
  switch (kind) {
    case Kind::success:
      return "every worker succeeded";
    case Kind::failure:
      return rank >= 0 ? fmt::format("rank {} on {} {}", rank, where, what)
                       : fmt::format("{}: {}", where, what);
    case Kind::shutdown:
      return fmt::format("{} was sent {}", where, signal_name(signal));
    case Kind::node_lost:
      return fmt::format("{} was lost: {}", where, what);
    case Kind::node_joined:
      return fmt::format("{} is waiting to join the run", where);
  }
  return what;
}

bool WorkerRecord::failed() const {
  return started && (running || !(WIFEXITED(status) && WEXITSTATUS(status) == 0));
}

bool WorkerRecord::failed_first() const {
  // A worker that died of another signal than the one tandemrun sent (SIGKILL while it was
  // asked to stop with SIGTERM) was dying already: its own failure, seen late.
  return failed() && !running &&
         (signal_sent == 0 || (WIFSIGNALED(status) && WTERMSIG(status) != signal_sent));
}

bool WorkerRecord::killed_from_outside() const {
  return failed_first() && WIFSIGNALED(status) && WTERMSIG(status) != SIGABRT;
}

std::string WorkerRecord::describe_status() const {
  if (!started) return "not started";
  if (running) return "still running";
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* what = ::sigdescr_np(sig);
    return fmt::format("was killed by {} ({}{}){}", signal_name(sig), sig,
                       what != nullptr ? fmt::format(": {}", what) : std::string(),
                       WCOREDUMP(status) ? ", core dumped" : "");
  }
  return fmt::format("ended with wait status {:#x}", status);
}

int WorkerRecord::exit_code() const {
  if (!running && WIFEXITED(status)) return WEXITSTATUS(status);
  if (!running && WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string NodeReport::to_json() const {
  return report_json(*this).dump();
}

NodeReport NodeReport::from_json(const std::string& text) {
  return parse(text, "node report", report_from);
}

std::string Verdict::to_json() const {
  json reps = json::array();
  for (const auto& r : reports) reps.push_back(report_json(r));
  json j{{"restart", restart},
         {"exit_code", exit_code},
         {"round", round},
         {"max_restarts", max_restarts},
         {"restarts_used", restarts_used},
         {"membership", membership},
         {"waiting", waiting},
         {"run_id", run_id},
         {"program", program},
         {"nnodes", nnodes},
         {"world_size", world_size},
         {"end", end_json(end)},
         {"lost_nodes", lost_nodes},
         {"lost_hosts", lost_hosts},
         {"reports", reps}};
  j["root"] = root ? worker_json(*root) : json();
  j["collectives"] = collectives;
  return j.dump();
}

Verdict Verdict::from_json(const std::string& text) {
  return parse(text, "verdict", [](const json& j) {
    Verdict v;
    v.restart = j.at("restart").get<bool>();
    v.exit_code = j.at("exit_code").get<int>();
    v.round = j.at("round").get<int>();
    v.max_restarts = j.at("max_restarts").get<int>();
    v.restarts_used = j.at("restarts_used").get<int>();
    v.membership = j.at("membership").get<bool>();
    v.waiting = j.at("waiting").get<int>();
    v.run_id = j.at("run_id").get<std::string>();
    v.program = j.at("program").get<std::string>();
    v.nnodes = j.at("nnodes").get<int>();
    v.world_size = j.at("world_size").get<int>();
    v.end = end_from(j.at("end"));
    if (!j.at("root").is_null()) v.root = worker_from(j.at("root"));
    v.lost_nodes = j.at("lost_nodes").get<std::vector<int>>();
    v.lost_hosts = j.at("lost_hosts").get<std::vector<std::string>>();
    for (const auto& r : j.at("reports")) v.reports.push_back(report_from(r));
    v.collectives = j.value("collectives", std::vector<std::string>{});
    return v;
  });
}

Verdict decide(const RoundEnd& end, std::vector<NodeReport> reports, std::vector<int> lost_nodes,
               std::vector<std::string> lost_hosts, int round, const RestartRules& rules) {
  Verdict v;
  v.end = end;
  v.round = round;
  v.max_restarts = rules.max_restarts;
  v.restarts_used = rules.restarts_used;
  v.waiting = rules.waiting;
  std::sort(reports.begin(), reports.end(),
            [](const NodeReport& a, const NodeReport& b) { return a.node < b.node; });
  v.reports = std::move(reports);
  v.lost_nodes = std::move(lost_nodes);
  v.lost_hosts = std::move(lost_hosts);

  const WorkerRecord* best = root_cause(v.reports, end.kind);
  if (best != nullptr && end.kind != RoundEnd::Kind::shutdown) v.root = *best;

  const bool node0_lost =
      std::find(v.lost_nodes.begin(), v.lost_nodes.end(), 0) != v.lost_nodes.end();
  const int remaining = rules.nnodes - static_cast<int>(v.lost_nodes.size()) + rules.waiting;
  const bool may_regroup = rules.elastic() && end.kind != RoundEnd::Kind::shutdown && !node0_lost &&
                           remaining >= rules.min_nodes;
  if (end.kind == RoundEnd::Kind::node_lost || !v.lost_nodes.empty()) {
    if (end.kind != RoundEnd::Kind::node_lost && end.kind != RoundEnd::Kind::shutdown) {
      v.end.kind = RoundEnd::Kind::node_lost;
      v.end.node = v.lost_nodes.front();
      v.end.host = v.lost_hosts.empty() ? std::string("?") : v.lost_hosts.front();
      v.end.what = "it did not report after its workers were stopped";
    }
    if (may_regroup) {
      // Elastic: the workers failed because a node went; the rest go on without it.
      v.restart = v.membership = true;
      v.exit_code = 0;
      return v;
    }
    v.exit_code = v.end.kind == RoundEnd::Kind::shutdown ? 128 + v.end.signal : 1;
    return v;
  }
  if (end.kind == RoundEnd::Kind::shutdown) {
    v.exit_code = 128 + end.signal;
    return v;
  }
  if (end.kind == RoundEnd::Kind::node_joined && may_regroup) {
    v.root.reset();  // the workers were stopped to let the node in, none failed on its own
    v.restart = v.membership = true;
    v.exit_code = 0;
    return v;
  }
  v.exit_code = v.root ? v.root->exit_code() : 1;
  v.restart = rules.restarts_used < rules.max_restarts;
  if (v.restart) ++v.restarts_used;
  return v;
}

std::string format_summary(const Verdict& v) {
  const bool multi = v.nnodes > 1;
  const std::string rule(72, '=');
  const std::string thin(72, '-');
  const std::string run =
      multi ? fmt::format("run {}, {} nodes, {} workers", v.run_id, v.nnodes, v.world_size)
            : fmt::format("run {}", v.run_id);
  std::string s = fmt::format("{}\n", rule);
  const WorkerRecord* shown = nullptr;
  switch (v.end.kind) {
    case RoundEnd::Kind::shutdown:
      s += multi ? fmt::format("tandemrun: stopped by {} on node {} ({}) ({})\n",
                               signal_name(v.end.signal), v.end.node, v.end.host, run)
                 : fmt::format("tandemrun: stopped by {} ({})\n", signal_name(v.end.signal), run);
      break;
    case RoundEnd::Kind::node_lost:
      s += fmt::format("tandemrun: {} failed: node {} ({}) was lost ({})\n", v.program, v.end.node,
                       v.end.host, run);
      s += fmt::format("{}\nRoot cause (lost node):\n", thin);
      s += fmt::format("  node      : {} ({})\n", v.end.node, v.end.host);
      s += fmt::format("  why       : {}\n", v.end.what);
      s += "  workers   : gone with their node (their tandemrun kills them when it dies)\n";
      if (v.root) {
        s += fmt::format("{}\nFirst worker failure seen by the other nodes:\n", thin);
        append_root(s, *v.root, multi);
        shown = &*v.root;
      }
      break;
    default:
      s += fmt::format("tandemrun: {} failed ({})\n", v.program, run);
      if (v.root) {
        s += fmt::format("{}\nRoot cause (first worker to fail):\n", thin);
        append_root(s, *v.root, multi);
        shown = &*v.root;
      } else {
        s += fmt::format("{}\nRoot cause: {}\n", thin, v.end.describe());
      }
      break;
  }
  s += fmt::format("{}\n{}:\n", thin, shown != nullptr ? "Other workers" : "Workers");
  bool any = false;
  for (const auto& r : v.reports) {
    for (const auto& w : r.workers) {
      if (shown != nullptr && w.rank == shown->rank) continue;
      any = true;
      append_worker_line(s, w, multi);
    }
  }
  for (std::size_t i = 0; i < v.lost_nodes.size(); ++i) {
    any = true;
    s += fmt::format("  node {} ({}): lost, no report\n", v.lost_nodes[i],
                     i < v.lost_hosts.size() ? v.lost_hosts[i] : std::string("?"));
  }
  if (!any) s += "  (none)\n";
  if (!v.collectives.empty()) {
    s += fmt::format("{}\nCollectives (the workers' last reports):\n", thin);
    for (const auto& line : v.collectives) s += fmt::format("  {}\n", line);
  }
  if (v.max_restarts > 0) {
    s += fmt::format("{}\nRestarts: {} of {} used{}\n", thin,
                     std::min(v.restarts_used, v.max_restarts), v.max_restarts,
                     v.end.kind == RoundEnd::Kind::failure ? "" : " (no restart after this)");
  }
  s += fmt::format("{}\n", rule);
  return s;
}

std::string format_restart_note(const Verdict& v) {
  if (v.membership) {
    std::string lost;
    for (std::size_t i = 0; i < v.lost_nodes.size(); ++i) {
      lost += fmt::format("{}node {} ({})", lost.empty() ? "" : ", ", v.lost_nodes[i],
                          i < v.lost_hosts.size() ? v.lost_hosts[i] : std::string("?"));
    }
    const int stay = v.nnodes - static_cast<int>(v.lost_nodes.size());
    std::string why = lost.empty() ? v.end.describe() : fmt::format("lost {}", lost);
    if (!lost.empty() && v.waiting > 0)
      why += fmt::format(" and {} node(s) waiting to join", v.waiting);
    return fmt::format(
        "tandemrun: {}: the run goes on with the {} remaining node(s){} in a new round (the "
        "workers restart at the new world size; this does not count against --max-restarts)\n",
        why, stay, v.waiting > 0 ? fmt::format(" and {} new", v.waiting) : std::string());
  }
  const std::string cause = v.root ? fmt::format("{} (pid {}) {}", where(*v.root, v.nnodes > 1),
                                                 v.root->pid, v.root->describe_status())
                                   : v.end.describe();
  return fmt::format("tandemrun: {}: restarting all {} worker(s) (restart {} of {})\n", cause,
                     v.world_size, v.restarts_used, v.max_restarts);
}

}  // namespace tandem::tools::tandemrun
