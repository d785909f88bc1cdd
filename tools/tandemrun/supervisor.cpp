#include "supervisor.hpp"

#include "rendezvous.hpp"
#include "session.hpp"
#include "tools_api/topology.hpp"
#include "worker.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <system_error>
#include <unistd.h>

namespace tandem::tools::tandemrun {
namespace {

using namespace std::chrono_literals;

// After SIGKILL, how long to wait for the kernel to reap; after the last worker exits, how
// long to keep reading pipes held open by processes that left the worker's group.
constexpr auto kReapBound = 5s;
constexpr auto kDrainBound = 2s;
// While workers run, their output is read every kOutputBatch rather than as each line is
// written: waking tandemrun for every line put it on a CPU right when a worker had just
// printed and started its next step (tandem-perf prints a row, then times the next size),
// and on a machine with as many ranks as cores that preempted a rank spinning in a
// collective and made its peers wait (docs/benchmarks-small.md). Lines still appear in order
// and within kOutputBatch, and a worker's last lines before its exit is reported. While the
// workers print nothing, the look doubles its interval up to kOutputQuiet: a look every
// kOutputBatch is itself a preemption of a rank every kOutputBatch; the first line after a
// silence then comes within kOutputQuiet.
constexpr auto kOutputBatch = 20ms;
constexpr auto kOutputQuiet = 320ms;

void signal_group(pid_t pgid, int sig) {
  if (::kill(-pgid, sig) != 0 && errno == ESRCH) ::kill(pgid, sig);
}

void note(std::string_view text) {
  write_all(2, fmt::format("tandemrun: {}\n", text));
}

double seconds(std::chrono::milliseconds d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

sigset_t handled_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, s);
  return set;
}

void block_signals() {
  const sigset_t set = handled_signals();
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // A closed console must not kill tandemrun before it stops the workers; write_all()
  // notices EPIPE instead. Workers get the default disposition back before exec.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, nullptr);
}

bool Worker::failed() const {
  return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

std::string Worker::describe_status() const {
  WorkerRecord r;
  r.running = running;
  r.status = status;
  return r.describe_status();
}

Supervisor::Supervisor(const LaunchOptions& options, const Session& session,
                       const Assignment& assignment, std::string program_path, int signal_fd,
                       RunLink& link)
    : options_(options),
      session_(session),
      assignment_(assignment),
      program_path_(std::move(program_path)),
      signal_fd_(signal_fd),
      link_(link),
      host_(tools_api::local_host_name()) {}

Supervisor::~Supervisor() {
  // Only reached with workers still running when something threw: leave none behind.
  for (auto& w : workers_) {
    if (!w->running) continue;
    signal_group(w->pid, SIGKILL);
    int status = 0;
    ::waitpid(w->pid, &status, 0);
  }
}

RoundResult Supervisor::run() {
  start_ = Clock::now();
  start_workers();
  loop();
  return result();
}

void Supervisor::start_workers() {
  const NodeSlot& me = assignment_.self();
  workers_.reserve(static_cast<std::size_t>(me.nproc));
  if (options_.cpu_bind != tools_api::CpuBind::none) {
    binding_ = tools_api::bind_local_ranks(tools_api::discover(), options_.cpu_bind, me.nproc);
    if (!binding_.warning.empty()) TANDEM_WARN(run, "tandemrun: {}", binding_.warning);
  }
  for (int local = 0; local < me.nproc; ++local) {
    start_worker(local, false);
    // A signal, or the end of the round elsewhere, while starting: stop rather than start
    // the rest.
    on_signals();
    on_events();
    if (stopping_ || !cut_off_.empty()) break;
  }
}

void Supervisor::start_worker(int local, bool replacement) {
  const NodeSlot& me = assignment_.self();
  auto w = std::make_unique<Worker>();
  w->local_rank = local;
  w->rank = me.first_rank + local;
  w->replacement = replacement;
  const std::string log = session_.log_path(w->rank, local);
  if (!log.empty()) {
    // A restarted worker's lines, or its replacement's, follow those of its earlier runs.
    const int mode = assignment_.round == 0 && !replacement ? O_TRUNC : O_APPEND;
    w->log_fd.reset(::open(log.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | mode, 0644));
    if (!w->log_fd)
      TANDEM_THROW(ErrorCode::Io, "cannot create log file {}: {}", log,
                   std::system_category().message(errno));
    if (replacement)
      write_all(w->log_fd.get(), "--- replacement ---\n");
    else if (assignment_.round > 0)
      write_all(w->log_fd.get(), fmt::format("--- restart {} ---\n", assignment_.round));
  }
  const int mask = options_.redirects.for_rank(local);
  const bool console = options_.on_console(local);
  // A replacement's rank is the one the group gives it when it joins.
  const std::string prefix =
      replacement ? fmt::format("[new {}]: ", w->rank) : fmt::format("[rank {}]: ", w->rank);
  w->out = std::make_unique<LineStream>(prefix, (mask & 1) || !console ? -1 : 1, w->log_fd.get(),
                                        &w->tail);
  w->err = std::make_unique<LineStream>(prefix, (mask & 2) || !console ? -1 : 2, w->log_fd.get(),
                                        &w->tail);

  const auto cpus =
      binding_.cpus.empty() ? tools_api::CpuList{} : binding_.cpus[static_cast<std::size_t>(local)];
  auto command = options_.command;
  if (options_.pass_local_rank) command.push_back(fmt::format("--local_rank={}", local));
  auto env = session_.worker_env(assignment_, local);
  if (replacement) env.emplace_back("TANDEM_JOIN=1");
  SpawnedWorker s = spawn_worker(program_path_, command, env, cpus);
  w->pid = s.pid;
  w->out_fd = std::move(s.out);
  w->err_fd = std::move(s.err);
  w->running = true;
  ++running_;
  TANDEM_INFO(run, "tandemrun: started {} (local rank {}) as pid {}",
              replacement ? fmt::format("a replacement for rank {}", w->rank)
                          : fmt::format("rank {}", w->rank),
              local, w->pid);
  if (!cpus.empty()) {
    const int numa = binding_.numa[static_cast<std::size_t>(local)];
    TANDEM_INFO(run, "tandemrun: rank {} (local rank {}) bound to CPUs {} ({}, --cpu-bind {})",
                w->rank, local, tools_api::to_string(cpus),
                numa < 0 ? "several NUMA nodes" : fmt::format("NUMA node {}", numa),
                tools_api::to_string(options_.cpu_bind));
  }
  workers_.push_back(std::move(w));
}

void Supervisor::loop() {
  std::vector<pollfd> pfds;
  std::vector<std::pair<Worker*, bool>> streams;  // (worker, is stderr) per pfds[2..]
  Deadline drain_until = Deadline::max();
  Deadline output_at{};
  Clock::duration output_every = kOutputBatch;
  bool drained = false;
  while (true) {
    auto now = Clock::now();
    // Draining or stopping: output as it comes. Otherwise in batches (kOutputBatch).
    const bool prompt = running_ == 0 || stopping_;
    if (!prompt && now >= output_at) {
      const OutputRead got = read_ready_output();
      now = Clock::now();
      output_every = got.any ? Clock::duration(kOutputBatch)
                             : std::min<Clock::duration>(output_every * 2, kOutputQuiet);
      output_at = got.more ? now : now + output_every;
    }
    if (running_ == 0 && drain_until == Deadline::max()) drain_until = now + kDrainBound;
    kill_if_overdue(now);
    if (running_ > 0 && killed_ && now >= give_up_at_) {
      note(
          fmt::format("{} worker(s) did not exit after SIGKILL (stuck in the kernel?); giving "
                      "up on them",
                      running_));
      break;
    }

    pfds.assign({pollfd{signal_fd_, POLLIN, 0}, pollfd{link_.event_fd(), POLLIN, 0}});
    streams.clear();
    if (prompt) add_output_fds(pfds, streams);
    if (running_ == 0 && !drained && (!output_open() || now >= drain_until)) {
      drained = true;
      close_output();
      continue;
    }
    if (drained) {
      report_success();
      if (end_ || !cut_off_.empty()) break;
    }

    Deadline next = drained ? Deadline::max() : drain_until;
    if (stopping_ && !killed_) next = std::min(next, kill_at_);
    if (killed_) next = std::min(next, give_up_at_);
    if (!prompt) next = std::min(next, output_at);
    const int rc = ::poll(pfds.data(), pfds.size(), tools_api::poll_timeout_ms(next));
    if (rc < 0 && errno != EINTR)
      TANDEM_THROW(ErrorCode::Io, "poll failed: {}", std::system_category().message(errno));
    if (rc > 0) dispatch(pfds, streams, prompt);
  }
}

void Supervisor::kill_if_overdue(Clock::time_point now) {
  if (!stopping_ || killed_ || now < kill_at_) return;
  if (running_ > 0) {
    note(
        fmt::format("{} worker(s) still running {:g} s after the stop signal: sending "
                    "SIGKILL",
                    running_, seconds(options_.grace_period)));
  }
  stop_all(SIGKILL);
  killed_ = true;
  give_up_at_ = now + kReapBound;
}

bool Supervisor::output_open() const {
  return std::any_of(workers_.begin(), workers_.end(),
                     [](const auto& w) { return w->out_fd || w->err_fd; });
}

void Supervisor::close_output() {
  for (auto& w : workers_) {
    w->out->finish();
    w->err->finish();
    w->out_fd.reset();
    w->err_fd.reset();
  }
  reap();  // descendants killed with their worker's group
}

void Supervisor::report_success() {
  // Lost workers (--on-worker-loss continue) do not count against the others' success.
  const auto started = std::count_if(workers_.begin(), workers_.end(),
                                     [](const auto& w) { return !w->replacement; });
  const bool all_ok =
      static_cast<int>(started) == assignment_.self().nproc &&
      std::none_of(workers_.begin(), workers_.end(),
                   [](const auto& w) { return w->failed() && !w->lost; }) &&
      std::any_of(workers_.begin(), workers_.end(), [](const auto& w) { return !w->lost; });
  if (!all_ok || end_ || !cut_off_.empty() || told_success_) return;
  told_success_ = true;
  std::vector<std::string> lost;
  for (const auto& w : workers_)
    if (w->lost) lost.push_back(fmt::format("rank {} {}", w->rank, w->describe_status()));
  if (!lost_nodes_.empty()) {
    note(
        fmt::format("the workers of this node exited 0 after losing {} and going on without "
                    "its ranks (--on-worker-loss continue)",
                    fmt::join(lost_nodes_, ", ")));
  }
  if (!lost.empty()) {
    note(
        fmt::format("the other workers of this node exited 0 after losing {} worker(s) ({}) "
                    "and going on without them (--on-worker-loss continue){}",
                    lost.size(), fmt::join(lost, "; "),
                    replaced_ == 0 ? std::string()
                                   : fmt::format("; {} replacement(s) started in their place "
                                                 "(--max-replacements)",
                                                 replaced_)));
  }
  try {
    if (auto e = link_.publish_success()) end_round(*e);
  } catch (const Error& e) {
    cut_off(store_gone(e.message()));
  }
}

void Supervisor::dispatch(const std::vector<pollfd>& pfds,
                          const std::vector<std::pair<Worker*, bool>>& streams, bool prompt) {
  // Output first, so a worker's last lines are read before its exit is reported.
  for (std::size_t i = 2; i < pfds.size(); ++i) {
    if (pfds[i].revents != 0) read_stream(*streams[i - 2].first, streams[i - 2].second);
  }
  if (!prompt && (pfds[0].revents != 0 || pfds[1].revents != 0)) {
    // What the pipes hold (64 KiB each unless a worker enlarged them), but bounded: a
    // worker that writes without pause must not hold off a signal.
    for (int i = 0; i < 16 && read_ready_output().more; ++i) {
    }
  }
  if (pfds[0].revents != 0) on_signals();
  if (pfds[1].revents != 0) on_events();
}

bool Supervisor::read_stream(Worker& w, bool err) {
  std::array<char, std::size_t{64} * 1024> buf;
  tools_api::Fd& fd = err ? w.err_fd : w.out_fd;
  LineStream& stream = err ? *w.err : *w.out;
  const ssize_t n = ::read(fd.get(), buf.data(), buf.size());
  if (n > 0) {
    stream.feed(std::string_view(buf.data(), static_cast<std::size_t>(n)));
  } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
    stream.finish();
    fd.reset();
  }
  return n == static_cast<ssize_t>(buf.size());
}

void Supervisor::add_output_fds(std::vector<pollfd>& pfds,
                                std::vector<std::pair<Worker*, bool>>& streams) const {
  for (const auto& w : workers_) {
    if (w->out_fd) {
      pfds.push_back({w->out_fd.get(), POLLIN, 0});
      streams.emplace_back(w.get(), false);
    }
    if (w->err_fd) {
      pfds.push_back({w->err_fd.get(), POLLIN, 0});
      streams.emplace_back(w.get(), true);
    }
  }
}

Supervisor::OutputRead Supervisor::read_ready_output() {
  std::vector<pollfd> pfds;
  std::vector<std::pair<Worker*, bool>> streams;
  add_output_fds(pfds, streams);
  OutputRead got;
  if (pfds.empty() || ::poll(pfds.data(), pfds.size(), 0) <= 0) return got;
  got.any = true;
  for (std::size_t i = 0; i < pfds.size(); ++i)
    if (pfds[i].revents != 0)
      got.more = read_stream(*streams[i].first, streams[i].second) || got.more;
  return got;
}

void Supervisor::on_signals() {
  signalfd_siginfo info{};
  while (::read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    const int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) continue;  // reaped below, whatever the count
    if (!stopping_) {
      interrupted_by_ = sig;
      if (running_ > 0) {
        note(fmt::format("received {}: forwarding it to {} worker(s) (SIGKILL after {:g} s)",
                         signal_name(sig), running_, seconds(options_.grace_period)));
      }
      if (cut_off_.empty() && !end_) {
        try {
          end_ = link_.publish_shutdown(sig);
        } catch (const Error& e) {
          cut_off_ = store_gone(e.message());
        }
      }
      stop_all(sig);
    } else if (!killed_) {
      note(fmt::format("received {} again: sending SIGKILL to every worker", signal_name(sig)));
      stop_all(SIGKILL);
      killed_ = true;
      give_up_at_ = Clock::now() + kReapBound;
    }
  }
  reap();
}

void Supervisor::on_events() {
  for (const auto& e : link_.take_events()) {
    switch (e.kind) {
      case WatchEvent::Kind::end:
        if (e.round != assignment_.round) break;
        try {
          end_round(RoundEnd::from_json(e.value));
        } catch (const std::runtime_error& x) {
          cut_off(x.what());
        }
        break;
      case WatchEvent::Kind::store_lost:
        cut_off(store_gone(e.value));
        break;
      case WatchEvent::Kind::node_lost:
        // Node 0 ends the round itself (the end arrives as an event); the others lose node 0.
        if (e.node == 0 && assignment_.node_rank != 0) {
          cut_off(fmt::format("node 0 ({}) hosting the store is gone: {}", e.host, e.value));
        } else if (options_.continue_on_worker_loss) {
          lost_nodes_.push_back(fmt::format("node {} ({})", e.node, e.host));
          note(
              fmt::format("node {} ({}) lost: {}; the workers of this node go on without its "
                          "ranks (--on-worker-loss continue)",
                          e.node, e.host, e.value));
        }
        break;
    }
  }
}

void Supervisor::end_round(const RoundEnd& end) {
  if (end_) return;
  end_ = end;
  if (end.kind == RoundEnd::Kind::success || stopping_) return;
  const int sig = end.kind == RoundEnd::Kind::shutdown ? end.signal : SIGTERM;
  if (running_ > 0) {
    note(fmt::format("{}: stopping the {} worker(s) of this node ({}, SIGKILL after {:g} s)",
                     end.describe(), running_, signal_name(sig), seconds(options_.grace_period)));
  }
  stop_all(sig);
}

std::string Supervisor::store_gone(const std::string& detail) const {
  return fmt::format("the tandemrun on node 0 ({}) hosting the store at {} is gone ({})",
                     assignment_.nodes.front().host, session_.store_address(), detail);
}

void Supervisor::cut_off(const std::string& why) {
  if (!cut_off_.empty()) return;
  cut_off_ = why;
  if (stopping_) return;
  if (running_ > 0) {
    note(fmt::format("{}: stopping the {} worker(s) of this node (SIGTERM, SIGKILL after {:g} s)",
                     why, running_, seconds(options_.grace_period)));
  }
  stop_all(SIGTERM);
}

void Supervisor::reap() {
  // Every exit first, then their consequences: a worker that is already gone must not be
  // counted as stopped by tandemrun because a sibling's exit was handled before its own.
  std::vector<Worker*> batch;
  while (true) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    for (auto& w : workers_) {
      if (w->pid != pid || !w->running) continue;
      w->running = false;
      w->status = status;
      w->exited_at = Clock::now();
      w->exited_wall = std::chrono::system_clock::now();
      --running_;
      batch.push_back(w.get());
      break;
    }
  }
  // Within one batch, a worker killed from outside most likely went first (its peers exit
  // when they lose it); the first failure handled names the round's end.
  std::stable_sort(batch.begin(), batch.end(), [](const Worker* a, const Worker* b) {
    const auto hard = [](const Worker* w) {
      return WIFSIGNALED(w->status) && WTERMSIG(w->status) != SIGABRT &&
             WTERMSIG(w->status) != w->signal_sent;
    };
    return hard(a) && !hard(b);
  });
  for (Worker* w : batch) on_worker_exit(*w);
}

void Supervisor::on_worker_exit(Worker& w) {
  // Whatever the worker left running in its group goes with it: nothing is orphaned.
  signal_group(w.pid, SIGKILL);
  TANDEM_INFO(run, "tandemrun: rank {} (pid {}) {}", w.rank, w.pid, w.describe_status());
  if (!w.failed() || stopping_) return;
  if (options_.continue_on_worker_loss && WIFSIGNALED(w.status) && running_ > 0) {
    w.lost = true;
    const bool replace = replaced_ < options_.max_replacements;
    note(fmt::format(
        "rank {} (pid {}) {}: the other {} worker(s) go on without it{} "
        "(--on-worker-loss continue{})",
        w.rank, w.pid, w.describe_status(), running_,
        replace ? "; a new worker starts to join them in its place" : "",
        replace ? fmt::format(", replacement {} of {}", replaced_ + 1, options_.max_replacements)
                : std::string()));
    if (replace) {
      ++replaced_;
      start_worker(w.local_rank, true);  // may reallocate workers_: `w` is not used after
    }
    return;
  }
  RoundEnd mine;
  mine.kind = RoundEnd::Kind::failure;
  mine.node = assignment_.node_rank;
  mine.host = host_;
  mine.rank = w.rank;
  mine.what = w.describe_status();
  if (!end_ && cut_off_.empty()) {
    try {
      end_ = link_.publish_failure(mine);
    } catch (const Error& e) {
      cut_off_ = store_gone(e.message());
    }
  }
  if (running_ > 0) {
    note(
        fmt::format("rank {} (pid {}) {}: stopping the other {} worker(s){} (SIGTERM, SIGKILL "
                    "after {:g} s)",
                    w.rank, w.pid, w.describe_status(), running_,
                    assignment_.nnodes() > 1 ? " of this node, and those of the other nodes" : "",
                    seconds(options_.grace_period)));
  }
  stop_all(SIGTERM);
}

void Supervisor::stop_all(int sig) {
  if (!stopping_) {
    stopping_ = true;
    kill_at_ = Clock::now() + options_.grace_period;
  }
  for (auto& w : workers_) {
    if (!w->running) continue;
    signal_group(w->pid, sig);
    if (sig != SIGKILL) signal_group(w->pid, SIGCONT);  // a stopped worker must see it
    w->signal_sent = sig;
  }
}

RoundResult Supervisor::result() const {
  RoundResult r;
  r.end = end_;
  r.cut_off = cut_off_;
  r.interrupted_by = interrupted_by_;
  r.report.node = assignment_.node_rank;
  r.report.host = host_;
  r.report.agent_pid = static_cast<int>(::getpid());
  for (int local = 0; local < assignment_.self().nproc; ++local) {
    WorkerRecord rec;
    rec.local_rank = local;
    rec.rank = assignment_.self().first_rank + local;
    rec.node = assignment_.node_rank;
    rec.host = host_;
    if (static_cast<std::size_t>(local) < workers_.size()) {
      const Worker& w = *workers_[static_cast<std::size_t>(local)];
      rec.pid = w.pid;
      rec.running = w.running;
      rec.status = w.status;
      rec.signal_sent = w.signal_sent;
      rec.exited_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(w.exited_wall.time_since_epoch())
              .count();
      rec.seconds = std::chrono::duration<double>(w.exited_at - start_).count();
      if (!w.running && w.failed()) rec.tail.assign(w.tail.lines().begin(), w.tail.lines().end());
    } else {
      rec.started = false;
    }
    r.report.workers.push_back(std::move(rec));
  }
  return r;
}

}  // namespace tandem::tools::tandemrun
