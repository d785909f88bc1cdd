// tandemrun: failures, signals and bad command lines.
#include "subprocess.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tandem::testing {
namespace {

using namespace std::chrono_literals;

// Never-hang bounds, not timings.
constexpr auto kReady = 60s;
constexpr auto kExit = 60s;

// pids announced by "[rank R]: ready PID" lines, once `n` ranks did.
std::map<int, pid_t> ready_pids(const std::string& out) {
  static const std::regex re(R"(^\[rank (\d+)\]: ready (\d+)$)");
  std::map<int, pid_t> m;
  for (const auto& line : split_lines(out)) {
    std::smatch sm;
    if (std::regex_match(line, sm, re)) m[std::stoi(sm[1])] = std::stoi(sm[2]);
  }
  return m;
}

bool all_ready(Subprocess& p, int n) {
  return p.wait_for(
      [n](const std::string& out, const std::string&) {
        return ready_pids(out).size() == static_cast<std::size_t>(n);
      },
      kReady);
}

// Opens a fifo read-write (never blocks) and writes a line: the worker blocked reading it
// proceeds. The fd stays open for the object's lifetime.
struct FifoRelease {
  explicit FifoRelease(const std::string& path) : fd(::open(path.c_str(), O_RDWR | O_CLOEXEC)) {
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::write(fd, "go\n", 3), 3);
  }
  ~FifoRelease() { ::close(fd); }
  int fd;
};

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

TEST(TandemrunFailure, FirstFailureStopsEveryOtherWorker) {
  TempDir dir;
  const std::string go = dir.fifo("go"), never = dir.fifo("never");
  const std::string script = fmt::format(
      "echo ready $$; case $RANK in "
      "1) read x < {0}; echo about to fail; exit 3;; "
      "0) exec sleep infinity;; "
      "*) read x < {1}; echo unreachable;; esac",
      go, never);
  Subprocess p({tandemrun_path(), "--nproc-per-node", "3", "/bin/sh", "-c", script});
  ASSERT_TRUE(all_ready(p, 3)) << p.out() << p.err();
  const auto pids = ready_pids(p.out());
  FifoRelease release(go);
  const auto r = p.wait(kExit);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(count(r.err, "Root cause"), 1u) << "one failure summary: " << r.err;
  EXPECT_NE(r.err.find("  rank      : 1 (local_rank 1)\n"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(fmt::format("  pid       : {}\n", pids.at(1))), std::string::npos);
  EXPECT_NE(r.err.find("  exit code : 3\n"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("    [rank 1]: about to fail\n"), std::string::npos) << r.err;
  for (int rank : {0, 2}) {
    EXPECT_NE(r.err.find(fmt::format("rank {} (pid {}): stopped by tandemrun with SIGTERM", rank,
                                     pids.at(rank))),
              std::string::npos)
        << r.err;
  }
  EXPECT_EQ(r.out.find("unreachable"), std::string::npos);
  for (const auto& [rank, pid] : pids) EXPECT_TRUE(process_gone(pid)) << "rank " << rank;
}

TEST(TandemrunFailure, SignalOfTheFailedWorkerIsNamed) {
  TempDir dir;
  const std::string go = dir.fifo("go");
  const std::string script = fmt::format(
      "ulimit -c 0; echo ready $$; if [ $RANK = 0 ]; then read x < {}; kill -SEGV $$; fi; "
      "exec sleep infinity",
      go);
  Subprocess p({tandemrun_path(), "--nproc-per-node", "2", "/bin/sh", "-c", script});
  ASSERT_TRUE(all_ready(p, 2)) << p.err();
  FifoRelease release(go);
  const auto r = p.wait(kExit);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 128 + SIGSEGV) << r.err;
  EXPECT_NE(r.err.find("  signal    : SIGSEGV (11)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("  rank      : 0 (local_rank 0)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 1 (pid"), std::string::npos) << r.err;
}

// --on-worker-loss continue: rank 0 is SIGKILLed, rank 1 goes on and exits 0 once it has been
// let go (after the loss); the run succeeds and tandemrun names the worker it lost.
TEST(TandemrunFailure, WithOnWorkerLossContinueALostWorkerLeavesTheOthersRunning) {
  TempDir dir;
  const std::string go = dir.fifo("go");
  const std::string done = dir.fifo("done");
  const std::string script = fmt::format(
      "echo ready $$; if [ $RANK = 0 ]; then read x < {}; kill -KILL $$; fi; read x < {}; "
      "echo rank $RANK went on; exit 0",
      go, done);
  Subprocess p({tandemrun_path(), "--nproc-per-node", "2", "--on-worker-loss", "continue",
                "/bin/sh", "-c", script});
  ASSERT_TRUE(all_ready(p, 2)) << p.err();
  { FifoRelease release(go); }
  // Rank 1 reads "done" only after tandemrun reported the loss: it must still be running then.
  ASSERT_TRUE(p.wait_for(
      [](const std::string&, const std::string& err) {
        return err.find("go on without it") != std::string::npos;
      },
      kExit))
      << p.err();
  FifoRelease release(done);
  const auto r = p.wait(kExit);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rank 1 went on"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("rank 0 (pid"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("was killed by SIGKILL"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exited 0 after losing 1 worker(s) (rank 0 was killed by SIGKILL"),
            std::string::npos)
      << r.err;
}

// --max-replacements 1: rank 0 is SIGKILLed and tandemrun starts a new worker in its place,
// with TANDEM_JOIN=1 (its program joins the running group) and the slot's RANK; when the
// replacement is killed too, no third one starts (one replacement in all), and the run
// succeeds once rank 1 exits 0.
TEST(TandemrunFailure, MaxReplacementsStartsANewWorkerInTheLostOnesPlace) {
  TempDir dir;
  const std::string go = dir.fifo("go");
  const std::string done = dir.fifo("done");
  const std::string script = fmt::format(
      "if [ -n \"$TANDEM_JOIN\" ]; then echo replacement join=$TANDEM_JOIN rank=$RANK; "
      "kill -KILL $$; fi; echo ready $$; if [ $RANK = 0 ]; then read x < {}; kill -KILL $$; "
      "fi; read x < {}; echo rank $RANK went on; exit 0",
      go, done);
  Subprocess p({tandemrun_path(), "--nproc-per-node", "2", "--on-worker-loss", "continue",
                "--max-replacements", "1", "/bin/sh", "-c", script});
  ASSERT_TRUE(all_ready(p, 2)) << p.err();
  { FifoRelease release(go); }
  // The replacement ran, and was lost in turn without a second one starting.
  ASSERT_TRUE(p.wait_for(
      [](const std::string&, const std::string& err) {
        return err.find("go on without it (--on-worker-loss continue)") != std::string::npos;
      },
      kExit))
      << p.err();
  FifoRelease release(done);
  const auto r = p.wait(kExit);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("[new 0]: replacement join=1 rank=0"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("a new worker starts to join them in its place (--on-worker-loss "
                       "continue, replacement 1 of 1)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("1 replacement(s) started in their place"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("rank 1 went on"), std::string::npos) << r.out;
}

// --max-replacements replaces workers the others go on without: alone, it is a usage error.
TEST(TandemrunFailure, MaxReplacementsWithoutContinueIsAUsageError) {
  Subprocess p({tandemrun_path(), "--nproc-per-node", "2", "--max-replacements", "1", "/bin/true"});
  const auto r = p.wait(kExit);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("add --on-worker-loss continue"), std::string::npos) << r.err;
}

// --on-worker-loss continue tolerates deaths by a signal only: a worker that exits with an
// error still stops the others, and the run fails with its code.
TEST(TandemrunFailure, WithOnWorkerLossContinueAnErrorExitStillStopsAll) {
  Subprocess p({tandemrun_path(), "--nproc-per-node", "2", "--on-worker-loss", "continue",
                "/bin/sh", "-c",
                "echo ready $$; if [ $RANK = 0 ]; then exit 3; fi; exec sleep infinity"});
  const auto r = p.wait(kExit);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(r.err.find("go on without it"), std::string::npos) << r.err;
}

TEST(TandemrunFailure, SigtermToTandemrunStopsWorkersAndExits143) {
  Subprocess p({tandemrun_path(), "--nproc-per-node", "2", "/bin/sh", "-c",
                "echo ready $$; exec sleep infinity"});
  ASSERT_TRUE(all_ready(p, 2)) << p.err();
  const auto pids = ready_pids(p.out());
  ASSERT_EQ(::kill(p.pid(), SIGTERM), 0);
  const auto r = p.wait(kExit);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 143) << r.err;
  EXPECT_NE(r.err.find("stopped by SIGTERM"), std::string::npos) << r.err;
  for (const auto& [rank, pid] : pids) EXPECT_TRUE(process_gone(pid)) << "rank " << rank;
}

TEST(TandemrunFailure, CtrlCReachesEachWorkerExactlyOnce) {
  // The worker counts SIGINTs; its background sleeps ignore SIGINT (non-interactive shell),
  // so only SIGKILL at the end of the grace period ends it.
  const std::string script =
      "trap 'echo got-int' INT; echo ready $$; "
      "while true; do sleep 1000 & wait $!; done";
  Subprocess p(
      {tandemrun_path(), "--nproc-per-node", "2", "--grace-period", "1", "/bin/sh", "-c", script});
  ASSERT_TRUE(all_ready(p, 2)) << p.err();
  const auto pids = ready_pids(p.out());
  // As a terminal does: SIGINT to the foreground process group (tandemrun's own).
  ASSERT_EQ(::kill(-p.pid(), SIGINT), 0);
  const auto r = p.wait(kExit);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_EQ(count(r.out, "[rank 0]: got-int\n"), 1u) << r.out;
  EXPECT_EQ(count(r.out, "[rank 1]: got-int\n"), 1u) << r.out;
  for (const auto& [rank, pid] : pids) EXPECT_TRUE(process_gone(pid)) << "rank " << rank;
}

TEST(TandemrunFailure, WorkerIgnoringSigtermIsKilledAfterTheGracePeriod) {
  TempDir dir;
  const std::string go = dir.fifo("go");
  const std::string script = fmt::format(
      "if [ $RANK = 0 ]; then echo ready $$; read x < {}; exit 4; fi; "
      "trap '' TERM; echo ready $$; exec sleep infinity",
      go);
  Subprocess p({tandemrun_path(), "--nproc-per-node", "2", "--grace-period", "0.5", "/bin/sh", "-c",
                script});
  ASSERT_TRUE(all_ready(p, 2)) << p.err();
  const auto pids = ready_pids(p.out());
  FifoRelease release(go);
  const auto r = p.wait(kExit);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_NE(
      r.err.find(fmt::format("rank 1 (pid {}): stopped by tandemrun with SIGKILL", pids.at(1))),
      std::string::npos)
      << r.err;
  EXPECT_TRUE(process_gone(pids.at(1)));
}

TEST(TandemrunFailure, RestartsEveryWorkerWhileRestartsRemain) {
  TempDir dir;
  const auto r =
      run_process({tandemrun_path(), "--nproc-per-node", "2", "--max-restarts", "2", "--log-dir",
                   dir.str(), "--run-id", "restart1", "/bin/sh", "-c",
                   "echo run $TANDEM_RESTART_COUNT $TORCHELASTIC_RESTART_COUNT; "
                   "if [ $RANK = 1 ] && [ $TANDEM_RESTART_COUNT -lt 2 ]; then exit 5; fi"});
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count(r.err, "exited with code 5: restarting all 2 worker(s)"), 2u) << r.err;
  EXPECT_NE(r.err.find("(restart 1 of 2)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(restart 2 of 2)"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("Root cause"), std::string::npos) << "no summary after success";
  // Rank 0 may be stopped before it prints in the failed runs; rank 1 prints, then fails.
  for (int run : {0, 1, 2})
    EXPECT_NE(r.out.find(fmt::format("[rank 1]: run {0} {0}\n", run)), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[rank 0]: run 2 2\n"), std::string::npos) << r.out;
  std::ifstream f(dir.file("restart1/rank_1.log"));
  const std::string log((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(log, "run 0 0\n--- restart 1 ---\nrun 1 1\n--- restart 2 ---\nrun 2 2\n");
}

TEST(TandemrunFailure, GivesUpWithOneSummaryWhenNoRestartRemains) {
  const auto r =
      run_process({tandemrun_path(), "--nproc-per-node", "2", "--max-restarts", "1", "/bin/sh",
                   "-c", "echo try $TANDEM_RESTART_COUNT; [ $RANK = 0 ] || exit 6"});
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 6) << r.err;
  EXPECT_EQ(count(r.err, "restarting all 2 worker(s) (restart 1 of 1)"), 1u) << r.err;
  EXPECT_EQ(count(r.err, "Root cause"), 1u) << r.err;
  EXPECT_NE(r.err.find("  rank      : 1 (local_rank 1)\n"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("    [rank 1]: try 1\n"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Restarts: 1 of 1 used"), std::string::npos) << r.err;
}

TEST(TandemrunUsage, UnknownFlagPrintsUsageAndExits2) {
  const auto r = run_process({tandemrun_path(), "--nproc-per-node", "2", "--bogus", "/bin/true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown option '--bogus'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Usage: tandemrun [OPTIONS]"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(TandemrunUsage, MalformedValuesExit2WithOneLine) {
  const std::map<std::vector<std::string>, std::string> cases = {
      {{"--nproc-per-node", "0"}, "at least 1"},
      {{"--nproc-per-node", "two"}, "not a number of workers"},
      {{"--nproc-per-node", "2", "--nnodes", "0"}, "--nnodes '0'"},
      {{"--nproc-per-node", "2", "--nnodes", "3:2"}, "MIN:MAX"},
      {{"--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "2"},
       "--node-rank 2 is not below --nnodes 2"},
      {{"--nproc-per-node", "2", "--master-port", "99999"}, "not a port number"},
      {{"--nproc-per-node", "3", "--gpus", "0,1"}, "disagree"},
      {{"--nproc-per-node", "2", "--standalone", "--nnodes", "2"}, "--standalone"},
      {{"--nproc-per-node", "2", "--rdzv-timeout", "0"}, "--rdzv-timeout"},
      {{"--nproc-per-node", "2", "--max-restarts", "-1"}, "--max-restarts"},
      {{"--nproc-per-node", "2", "--ips", "10.9.9.1,10.9.9.1"}, "listed twice"},
      {{"--nproc-per-node", "2", "--ips", "10.9.9.1,10.9.9.2"}, "none of these is an address"},
      {{"--gpus", "0,1", "--selected_gpus", "0,1"}, "give one of them"},
      {{"--nproc-per-node", "2", "--log-dir", "/tmp/a", "--log_dir", "/tmp/b"}, "--log_dir"},
      {{"--nproc-per-node", "2", "--start_port", "65535"}, "--start_port '65535'"},
      {{"--selected_gpus", "0,,1"}, "an empty entry"},
      {{"--nproc-per-node", "2", "--rdzv-conf", "read_timeout=5"},
       "unknown key 'read_timeout' (known: join_timeout, last_call_timeout)"},
      {{"--nproc-per-node", "2", "--rdzv-conf", "last_call_timeout=soon"}, "KEY=SECONDS pairs"},
      {{"--nproc-per-node", "2", "--rdzv-conf", "last_call_timeout=-1"},
       "--rdzv-conf last_call_timeout -1"},
  };
  for (const auto& [args, needle] : cases) {
    std::vector<std::string> argv{tandemrun_path()};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("/bin/true");
    const auto r = run_process(argv, {"TANDEM_STORE_TOKEN=t"});
    EXPECT_EQ(r.exit_code, 2) << needle;
    EXPECT_EQ(split_lines(r.err).size(), 1u) << r.err;
    EXPECT_TRUE(r.err.starts_with("tandemrun: ")) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
  // Paddle's variable for the endpoints' first port is checked like the flag.
  const auto port = run_process({tandemrun_path(), "--nproc-per-node", "1", "/bin/true"},
                                {"FLAGS_START_PORT=port"});
  EXPECT_EQ(port.exit_code, 2);
  EXPECT_NE(port.err.find("FLAGS_START_PORT 'port'"), std::string::npos) << port.err;
  const auto missing = run_process({tandemrun_path(), "/bin/true"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("--nproc-per-node is required"), std::string::npos);
}

TEST(TandemrunUsage, SeveralNodesNeedASharedToken) {
  const auto r = run_process(
      {tandemrun_path(), "--nproc-per-node", "1", "--nnodes", "2", "--node-rank", "1", "/bin/true"},
      {"TANDEM_STORE_TOKEN="});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(split_lines(r.err).size(), 1u) << r.err;
  EXPECT_NE(r.err.find("export TANDEM_STORE_TOKEN="), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("od -An -tx1 -N16 /dev/urandom"), std::string::npos) << r.err;
}

TEST(TandemrunUsage, GpuWorkersWithoutAGpuAreRefused) {
  if (::access("/proc/driver/nvidia/gpus", F_OK) == 0 || ::access("/usr/bin/nvidia-smi", F_OK) == 0)
    GTEST_SKIP() << "this host has NVIDIA GPUs or nvidia-smi";
  const auto r = run_process({tandemrun_path(), "--nproc-per-node", "gpu", "/bin/true"},
                             {"PATH=/usr/bin:/bin"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no NVIDIA GPU found"), std::string::npos) << r.err;
}

TEST(TandemrunUsage, MissingOrNonExecutableProgramFailsBeforeStarting) {
  const auto missing =
      run_process({tandemrun_path(), "--nproc-per-node", "2", "no-such-program-tandem-test"});
  EXPECT_EQ(missing.exit_code, 127);
  EXPECT_EQ(missing.err,
            "tandemrun: cannot run 'no-such-program-tandem-test': not found in PATH\n");
  EXPECT_EQ(missing.out, "");
  TempDir dir;
  const auto plain = run_process({tandemrun_path(), "--nproc-per-node", "2", dir.str()});
  EXPECT_EQ(plain.exit_code, 126);
  EXPECT_NE(plain.err.find("is a directory"), std::string::npos) << plain.err;
  const std::string text_file = dir.file("data.txt");
  std::ofstream(text_file) << "not a program\n";
  ::chmod(text_file.c_str(), 0644);
  const auto noexec = run_process({tandemrun_path(), "--nproc-per-node", "2", text_file});
  EXPECT_EQ(noexec.exit_code, 126);
  EXPECT_NE(noexec.err.find("not an executable file"), std::string::npos) << noexec.err;
}

TEST(TandemrunUsage, MasterPortInUseIsNamed) {
  const BusyPort busy;
  const int port = busy.port();
  const auto r = run_process({tandemrun_path(), "--nproc-per-node", "2", "--master-port",
                              std::to_string(port), "/bin/true"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(fmt::format("127.0.0.1:{}", port)), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("in use"), std::string::npos) << r.err;
  // A start that fails there points to the preflight.
  EXPECT_NE(r.err.find("run tandemrun --check with the same flags"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(TandemrunUsage, HelpListsTheFlagsByGroupWithDefaultsAndExits0) {
  const auto r = run_process({tandemrun_path(), "--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* text : {"--nproc-per-node,--nproc_per_node",
                           "--gpus,--devices",
                           "--nnodes",
                           "--node-rank",
                           "--ips",
                           "--master-addr,--master_addr",
                           "--master-port,--master_port",
                           "--rdzv-endpoint",
                           "--run-id,--run_id,--rdzv-id,--rdzv_id",
                           "--rdzv-timeout",
                           "--standalone",
                           "--max-restarts",
                           "--monitor-interval",
                           "--grace-period",
                           "--log-dir",
                           "--redirects",
                           "--tee",
                           "--local-ranks-filter",
                           "Workers:",
                           "Nodes and rendezvous:",
                           "Output:",
                           "Supervision:",
                           "SECONDS=900",
                           "TEXT=127.0.0.1",
                           "29500 on several",
                           "INT=0"}) {
    EXPECT_NE(r.out.find(text), std::string::npos) << text;
  }
}

}  // namespace
}  // namespace tandem::testing
