// tandemrun across two "hosts" (network namespaces joined by a veth pair): the same command on
// both, rendezvous, global ranks, tandem-perf over shm + tcp, and every failure path: a killed
// worker, a killed tandemrun on either node, restarts, signals, an unreachable or busy
// master. After each run no process of the run is left anywhere.
#include "netns.hpp"
#include "python_torch.hpp"
#include "subprocess.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <memory>
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
constexpr int kPort = 29400;

std::atomic<int> run_counter{0};

class TandemrunMultiNode : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (auto why = NetnsPair::unavailable()) {
      skip_reason_ = *why;
      return;
    }
    try {
      pair_ = std::make_unique<NetnsPair>();
    } catch (const std::exception& e) {
      skip_reason_ = fmt::format("cannot make network namespaces: {}", e.what());
    }
  }
  static void TearDownTestSuite() { pair_.reset(); }

  void SetUp() override {
    if (!pair_) GTEST_SKIP() << "multi-node tests skipped: " << skip_reason_;
    marker_ = fmt::format("TANDEM_TEST_MARKER=mn-{}-{}", ::getpid(), run_counter++);
  }

  void TearDown() override {
    if (pair_) {
      EXPECT_TRUE(no_process_left()) << "processes of the run are left behind";
    }
  }

  // tandemrun on node i: the same command on both nodes except --node-rank.
  std::unique_ptr<Subprocess> node(int i, const std::vector<std::string>& args,
                                   bool with_node_rank = true,
                                   std::vector<std::string> env = {}) const {
    std::vector<std::string> argv{tandemrun_path()};
    if (with_node_rank) {
      for (const char* a : {"--nnodes", "2", "--master-addr"}) argv.emplace_back(a);
      argv.push_back(pair_->addr(0));
      argv.insert(argv.end(),
                  {"--master-port", std::to_string(kPort), "--node-rank", std::to_string(i)});
    }
    argv.insert(argv.end(), args.begin(), args.end());
    env.push_back("TANDEM_STORE_TOKEN=multinode-test-token");
    env.push_back(marker_);
    return std::make_unique<Subprocess>(pair_->exec_in(i, argv), env);
  }

  // tandemrun on node i of an elastic run (--nnodes 1:2): heartbeats every 0.2 s (a node is
  // lost after 5 s without), rounds close 1 s after one node joined.
  std::unique_ptr<Subprocess> elastic_node(int i, const std::vector<std::string>& args) const {
    std::vector<std::string> argv{"--nnodes",           "1:2",
                                  "--master-addr",      pair_->addr(0),
                                  "--master-port",      std::to_string(kPort),
                                  "--node-rank",        std::to_string(i),
                                  "--monitor-interval", "0.2",
                                  "--grace-period",     "2",
                                  "--rdzv-conf",        "last_call_timeout=1"};
    argv.insert(argv.end(), args.begin(), args.end());
    return node(i, argv, false);
  }

  // Bounded wait until no process carries this run's marker (killed ones may take a moment).
  bool no_process_left() const {
    const Deadline deadline = deadline_in(10s);
    while (!processes_with_env(marker_).empty()) {
      if (Clock::now() >= deadline) return false;
      ::usleep(20000);
    }
    return true;
  }

  static inline std::unique_ptr<NetnsPair> pair_;
  static inline std::string skip_reason_;
  std::string marker_;
};

// "ready <rank> <pid>" lines of a node's output, by rank.
std::map<int, pid_t> ready(const std::string& out) {
  static const std::regex kReadyLine(R"(^\[rank (\d+)\]: ready (\d+)$)");
  std::map<int, pid_t> m;
  for (const auto& line : split_lines(out)) {
    std::smatch sm;
    if (std::regex_match(line, sm, kReadyLine)) m[std::stoi(sm[1])] = std::stoi(sm[2]);
  }
  return m;
}

bool wait_ready(Subprocess& p, std::size_t n) {
  return p.wait_for(
      [n](const std::string& out, const std::string&) { return ready(out).size() == n; }, kReady);
}

constexpr const char* kSleeper = "echo ready $$; exec sleep 1000";

TEST_F(TandemrunMultiNode, TandemPerfOnTwoNodesUsesShmAndTcpAndHasNoWrongResults) {
  const std::vector<std::string> perf{"--nproc-per-node",
                                      "2",
                                      tandem_perf_path(),
                                      "-c",
                                      "allreduce",
                                      "-b",
                                      "8",
                                      "-e",
                                      "1M",
                                      "-f",
                                      "8",
                                      "-n",
                                      "3",
                                      "-w",
                                      "1"};
  auto a = node(0, perf);
  auto b = node(1, perf);
  const auto ra = a->wait(kExit);
  const auto rb = b->wait(kExit);
  ASSERT_FALSE(ra.timed_out || rb.timed_out);
  EXPECT_EQ(ra.exit_code, 0) << ra.out << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.out << rb.err;
  EXPECT_TRUE(std::regex_search(ra.out, std::regex(R"(shm to 1 peer.*tcp to 2 peer)")))
      << "rank 0 reaches rank 1 (same node) by shm and ranks 2, 3 by tcp:\n"
      << ra.out;
  EXPECT_NE(ra.out.find("Rank   3 Pid"), std::string::npos) << ra.out;
  // Every row of the table: both #wrong columns are 0.
  static const std::regex kRow(
      R"(^\[rank 0\]:\s+(\d+)\s+\d+\s+\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+(\d+)\s+\S+\s+\S+\s+\S+\s+\S+\s+(\d+)\s+\S+$)");
  int rows = 0;
  for (const auto& line : split_lines(ra.out)) {
    std::smatch m;
    if (!std::regex_match(line, m, kRow)) continue;
    ++rows;
    EXPECT_EQ(m[2].str(), "0") << line;
    EXPECT_EQ(m[3].str(), "0") << line;
  }
  EXPECT_EQ(rows, 6) << "sizes 8 B .. 1 MiB by 8x:\n" << ra.out;
  EXPECT_NE(ra.out.find("Out of bounds values : 0 OK"), std::string::npos) << ra.out;
}

TEST_F(TandemrunMultiNode, KilledWorkerOnNode1StopsBothNodesWithTheSameSummary) {
  const std::vector<std::string> perf{"--nproc-per-node",
                                      "2",
                                      "--grace-period",
                                      "2",
                                      tandem_perf_path(),
                                      "-c",
                                      "allreduce",
                                      "-b",
                                      "64K",
                                      "-e",
                                      "64K",
                                      "-n",
                                      "1000000",
                                      "-w",
                                      "1"};
  auto a = node(0, perf);
  auto b = node(1, perf);
  static const std::regex kPidLine(R"(#\s+Rank\s+3\s+Pid\s+(\d+))");
  ASSERT_TRUE(a->wait_for(
      [](const std::string& out, const std::string&) {
        return std::regex_search(out, kPidLine) && out.find("(B)") != std::string::npos;
      },
      kReady))
      << a->out() << a->err();
  std::smatch m;
  const std::string out = a->out();
  ASSERT_TRUE(std::regex_search(out, m, kPidLine));
  const pid_t rank3 = std::stoi(m[1]);
  ASSERT_EQ(::kill(rank3, SIGKILL), 0);
  const auto ra = a->wait(kExit);
  const auto rb = b->wait(kExit);
  ASSERT_FALSE(ra.timed_out || rb.timed_out);
  EXPECT_EQ(ra.exit_code, 128 + SIGKILL) << ra.err;
  EXPECT_EQ(rb.exit_code, 128 + SIGKILL) << rb.err;
  const std::string sa = failure_summary(ra.err), sb = failure_summary(rb.err);
  ASSERT_FALSE(sa.empty()) << ra.err;
  EXPECT_EQ(sa, sb) << "every node prints the same summary";
  EXPECT_NE(sa.find("  rank      : 3 (local_rank 1 on node 1)\n"), std::string::npos) << sa;
  EXPECT_NE(sa.find(fmt::format("  pid       : {}\n", rank3)), std::string::npos) << sa;
  EXPECT_NE(sa.find("  signal    : SIGKILL (9)\n"), std::string::npos) << sa;
  EXPECT_NE(sa.find("  exit code : 137\n"), std::string::npos) << sa;
  EXPECT_NE(sa.find("2 nodes, 4 workers"), std::string::npos) << sa;
}

TEST_F(TandemrunMultiNode, WorkerFailingOnlyOnItsFirstRunSucceedsAfterOneRestart) {
  const std::string script =
      "if [ $RANK = 3 ] && [ $TANDEM_RESTART_COUNT = 0 ]; then echo failing; exit 3; fi; "
      "echo ok $RANK $TANDEM_RESTART_COUNT $TORCHELASTIC_RESTART_COUNT $TORCHELASTIC_MAX_RESTARTS";
  const std::vector<std::string> args{
      "--nproc-per-node", "2", "--max-restarts", "1", "/bin/sh", "-c", script};
  auto a = node(0, args);
  auto b = node(1, args);
  const auto ra = a->wait(kExit);
  const auto rb = b->wait(kExit);
  ASSERT_FALSE(ra.timed_out || rb.timed_out);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  for (const auto* r : {&ra, &rb}) {
    EXPECT_NE(r->err.find("rank 3 on node 1"), std::string::npos) << r->err;
    EXPECT_NE(r->err.find("exited with code 3: restarting all 4 worker(s) (restart 1 of 1)"),
              std::string::npos)
        << r->err;
  }
  for (int rank : {0, 1})
    EXPECT_NE(ra.out.find(fmt::format("[rank {0}]: ok {0} 1 1 1\n", rank)), std::string::npos)
        << ra.out;
  for (int rank : {2, 3})
    EXPECT_NE(rb.out.find(fmt::format("[rank {0}]: ok {0} 1 1 1\n", rank)), std::string::npos)
        << rb.out;
  EXPECT_NE(rb.out.find("[rank 3]: failing\n"), std::string::npos) << rb.out;
}

TEST_F(TandemrunMultiNode, KilledTandemrunOfNode1IsNoticedByNode0) {
  const std::vector<std::string> args{
      "--nproc-per-node", "2",  "--grace-period", "1", "--monitor-interval", "0.5",
      "/bin/sh",          "-c", kSleeper};
  auto a = node(0, args);
  auto b = node(1, args);
  ASSERT_TRUE(wait_ready(*a, 2)) << a->err();
  ASSERT_TRUE(wait_ready(*b, 2)) << b->err();
  ASSERT_EQ(::kill(b->pid(), SIGKILL), 0);
  const auto ra = a->wait(kExit);
  ASSERT_FALSE(ra.timed_out);
  EXPECT_LT(ra.seconds, 45) << "node 0 notices within seconds";
  EXPECT_EQ(ra.exit_code, 1) << ra.err;
  const std::string s = failure_summary(ra.err);
  EXPECT_NE(s.find("node 1 ("), std::string::npos) << ra.err;
  EXPECT_NE(s.find("was lost"), std::string::npos) << s;
  EXPECT_NE(s.find("no heartbeat"), std::string::npos) << s;
}

TEST_F(TandemrunMultiNode, KilledTandemrunOfNode0IsNoticedByNode1) {
  const std::vector<std::string> args{"--nproc-per-node", "2",  "--grace-period", "1",
                                      "/bin/sh",          "-c", kSleeper};
  auto a = node(0, args);
  auto b = node(1, args);
  ASSERT_TRUE(wait_ready(*a, 2)) << a->err();
  ASSERT_TRUE(wait_ready(*b, 2)) << b->err();
  ASSERT_EQ(::kill(a->pid(), SIGKILL), 0);
  const auto rb = b->wait(kExit);
  ASSERT_FALSE(rb.timed_out);
  EXPECT_EQ(rb.exit_code, 1) << rb.err;
  const std::string s = failure_summary(rb.err);
  EXPECT_NE(s.find("node 0 ("), std::string::npos) << rb.err;
  EXPECT_NE(s.find("hosting the store at " + pair_->addr(0)), std::string::npos) << s;
  EXPECT_NE(s.find("is gone"), std::string::npos) << s;
}

TEST_F(TandemrunMultiNode, SigtermToOneNodeReachesEveryWorkerOnBothNodes) {
  // Each worker says when SIGTERM reaches it; its background sleep would outlive it if
  // tandemrun did not end the worker's process group.
  const std::string script =
      "trap 'echo got-term $RANK; exit 0' TERM; echo ready $$; "
      "while true; do sleep 1000 & wait $!; done";
  const std::vector<std::string> args{"--nproc-per-node", "2", "/bin/sh", "-c", script};
  auto a = node(0, args);
  auto b = node(1, args);
  ASSERT_TRUE(wait_ready(*a, 2)) << a->err();
  ASSERT_TRUE(wait_ready(*b, 2)) << b->err();
  ASSERT_EQ(::kill(b->pid(), SIGTERM), 0);
  const auto ra = a->wait(kExit);
  const auto rb = b->wait(kExit);
  ASSERT_FALSE(ra.timed_out || rb.timed_out);
  EXPECT_EQ(ra.exit_code, 143) << ra.err;
  EXPECT_EQ(rb.exit_code, 143) << rb.err;
  for (int rank : {0, 1})
    EXPECT_NE(ra.out.find(fmt::format("[rank {0}]: got-term {0}\n", rank)), std::string::npos)
        << ra.out;
  for (int rank : {2, 3})
    EXPECT_NE(rb.out.find(fmt::format("[rank {0}]: got-term {0}\n", rank)), std::string::npos)
        << rb.out;
  EXPECT_EQ(failure_summary(ra.err), failure_summary(rb.err));
  EXPECT_NE(failure_summary(ra.err).find("stopped by SIGTERM on node 1"), std::string::npos)
      << ra.err;
}

TEST_F(TandemrunMultiNode, UnreachableMasterIsNamedAfterTheRendezvousTimeout) {
  auto b = node(1, {"--nproc-per-node", "1", "--rdzv-timeout", "1", "/bin/true"});
  const auto rb = b->wait(kExit);
  ASSERT_FALSE(rb.timed_out);
  EXPECT_EQ(rb.exit_code, 1) << rb.err;
  EXPECT_NE(rb.err.find(fmt::format("{}:{}", pair_->addr(0), kPort)), std::string::npos) << rb.err;
  EXPECT_NE(rb.err.find("--rdzv-timeout 1 s"), std::string::npos) << rb.err;
  EXPECT_NE(rb.err.find("firewall"), std::string::npos) << rb.err;
  EXPECT_EQ(rb.out, "");
}

TEST_F(TandemrunMultiNode, MasterPortInUseOnNode0IsNamed) {
  // Another run holds the port on node 0's address.
  auto holder = node(0,
                     {"--nproc-per-node", "1", "--master-addr", pair_->addr(0), "--master-port",
                      std::to_string(kPort), "/bin/sh", "-c", kSleeper},
                     false);
  ASSERT_TRUE(wait_ready(*holder, 1)) << holder->err();
  auto a = node(0, {"--nproc-per-node", "1", "/bin/true"});
  const auto ra = a->wait(kExit);
  ASSERT_FALSE(ra.timed_out);
  EXPECT_EQ(ra.exit_code, 1) << ra.err;
  EXPECT_NE(ra.err.find(fmt::format("{}:{}", pair_->addr(0), kPort)), std::string::npos) << ra.err;
  EXPECT_NE(ra.err.find("in use"), std::string::npos) << ra.err;
  ASSERT_EQ(::kill(holder->pid(), SIGTERM), 0);
  EXPECT_EQ(holder->wait(kExit).exit_code, 143);
}

TEST_F(TandemrunMultiNode, IpsListGivesEachNodeItsRank) {
  const std::vector<std::string> args{
      "--ips",
      pair_->addr(0) + "," + pair_->addr(1),
      "--master-port",
      std::to_string(kPort),
      "--gpus",
      "4,6",
      "/bin/sh",
      "-c",
      "echo $RANK $GROUP_RANK $LOCAL_RANK $CUDA_VISIBLE_DEVICES $MASTER_ADDR"};
  auto a = node(0, args, false);
  auto b = node(1, args, false);
  const auto ra = a->wait(kExit);
  const auto rb = b->wait(kExit);
  ASSERT_EQ(ra.exit_code, 0) << ra.err;
  ASSERT_EQ(rb.exit_code, 0) << rb.err;
  const std::string m = pair_->addr(0);
  EXPECT_NE(ra.out.find(fmt::format("[rank 0]: 0 0 0 4 {}\n", m)), std::string::npos) << ra.out;
  EXPECT_NE(ra.out.find(fmt::format("[rank 1]: 1 0 1 6 {}\n", m)), std::string::npos) << ra.out;
  EXPECT_NE(rb.out.find(fmt::format("[rank 2]: 2 1 0 4 {}\n", m)), std::string::npos) << rb.out;
  EXPECT_NE(rb.out.find(fmt::format("[rank 3]: 3 1 1 6 {}\n", m)), std::string::npos) << rb.out;
}

// Paddle's endpoints across two hosts (--ips, --start_port): node addresses by node rank,
// ports by local rank, as Paddle's launcher lists them.
TEST_F(TandemrunMultiNode, PaddleEndpointsListEveryTrainerOfEveryNode) {
  const std::vector<std::string> args{
      "--ips",
      pair_->addr(0) + "," + pair_->addr(1),
      "--master-port",
      std::to_string(kPort),
      "--nproc-per-node",
      "2",
      "--start_port",
      "7200",
      "/bin/sh",
      "-c",
      "echo $PADDLE_TRAINER_ID $PADDLE_TRAINERS_NUM $PADDLE_NNODES $PADDLE_CURRENT_ENDPOINT "
      "$PADDLE_TRAINER_ENDPOINTS $PADDLE_MASTER"};
  auto a = node(0, args, false);
  auto b = node(1, args, false);
  const auto ra = a->wait(kExit);
  const auto rb = b->wait(kExit);
  ASSERT_EQ(ra.exit_code, 0) << ra.err;
  ASSERT_EQ(rb.exit_code, 0) << rb.err;
  const std::string h0 = pair_->addr(0), h1 = pair_->addr(1);
  const std::string all = fmt::format("{0}:7200,{0}:7201,{1}:7200,{1}:7201", h0, h1);
  const std::string master = fmt::format("{}:", h0);
  const auto line = [&](int rank, const std::string& host, int port) {
    return fmt::format("[rank {}]: {} 4 2 {}:{} {} {}", rank, rank, host, port, all, master);
  };
  EXPECT_NE(ra.out.find(line(0, h0, 7200)), std::string::npos) << ra.out;
  EXPECT_NE(ra.out.find(line(1, h0, 7201)), std::string::npos) << ra.out;
  EXPECT_NE(rb.out.find(line(2, h1, 7200)), std::string::npos) << rb.out;
  EXPECT_NE(rb.out.find(line(3, h1, 7201)), std::string::npos) << rb.out;
}

// tandemrun --check on two hosts: every node prints every node's lines; a node with another
// token is refused by the store and node 0 names the node that never joined.
TEST_F(TandemrunMultiNode, CheckRunsOnEveryNodeAndNamesAWrongToken) {
  const std::vector<std::string> args{"--nproc-per-node", "2", "--rdzv-timeout", "5", "--check"};
  auto a = node(0, args);
  auto b = node(1, args);
  const auto ra = a->wait(kExit);
  const auto rb = b->wait(kExit);
  ASSERT_EQ(ra.exit_code, 0) << ra.out << ra.err;
  ASSERT_EQ(rb.exit_code, 0) << rb.out << rb.err;
  for (const auto* r : {&ra, &rb}) {
    for (int n : {0, 1}) {
      EXPECT_NE(r->out.find(fmt::format("check node {} (", n)), std::string::npos) << r->out;
      EXPECT_NE(r->out.find(fmt::format("ranks listen on {} ", pair_->addr(n))), std::string::npos)
          << r->out;
    }
    EXPECT_NE(r->out.find("2 node(s) joined, 4 rank(s) in all"), std::string::npos) << r->out;
    EXPECT_NE(r->out.find("check: all passed"), std::string::npos) << r->out;
  }

  auto c = node(0, args);
  auto d = node(1, args, true, {"TANDEM_STORE_TOKEN=another-token"});
  const auto rc = c->wait(kExit);
  const auto rd = d->wait(kExit);
  EXPECT_EQ(rc.exit_code, 1) << rc.out << rc.err;
  EXPECT_EQ(rd.exit_code, 1) << rd.out << rd.err;
  EXPECT_NE(rd.out.find("store     FAIL"), std::string::npos) << rd.out;
  EXPECT_NE(rd.out.find("TANDEM_STORE_TOKEN"), std::string::npos) << rd.out;
  EXPECT_NE(rc.out.find("nodes     FAIL"), std::string::npos) << rc.out;
}

TEST_F(TandemrunMultiNode, NodesWithoutNodeRankAndUnequalWorkerCountsGetNodeMajorRanks) {
  // Node 1 starts first; the host of --master-addr is still node 0.
  const std::string script =
      "echo $RANK $GROUP_RANK $LOCAL_RANK $LOCAL_WORLD_SIZE $WORLD_SIZE $GROUP_WORLD_SIZE";
  const auto args = [&](int nproc) {
    return std::vector<std::string>{"--nnodes",
                                    "1:2",
                                    "--master-addr",
                                    pair_->addr(0),
                                    "--master-port",
                                    std::to_string(kPort),
                                    "--nproc-per-node",
                                    std::to_string(nproc),
                                    "/bin/sh",
                                    "-c",
                                    script};
  };
  auto b = node(1, args(3), false);
  auto a = node(0, args(1), false);
  const auto ra = a->wait(kExit);
  const auto rb = b->wait(kExit);
  ASSERT_EQ(ra.exit_code, 0) << ra.err;
  ASSERT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_EQ(ra.out, "[rank 0]: 0 0 0 1 4 2\n");
  for (int local = 0; local < 3; ++local) {
    EXPECT_NE(rb.out.find(fmt::format("[rank {0}]: {0} 1 {1} 3 4 2\n", local + 1, local)),
              std::string::npos)
        << rb.out;
  }
}

TEST_F(TandemrunMultiNode, DuplicateNodeRanksAreRefusedOnEveryNode) {
  const auto args = [&](int node_rank) {
    return std::vector<std::string>{"--nnodes",         "3",
                                    "--node-rank",      std::to_string(node_rank),
                                    "--master-addr",    pair_->addr(0),
                                    "--master-port",    std::to_string(kPort),
                                    "--nproc-per-node", "1",
                                    "/bin/true"};
  };
  auto a = node(0, args(0), false);
  auto b1 = node(1, args(1), false);
  auto b2 = node(1, args(1), false);
  for (auto* p : {a.get(), b1.get(), b2.get()}) {
    const auto r = p->wait(kExit);
    ASSERT_FALSE(r.timed_out);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("duplicate --node-rank 1"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "") << "no worker starts";
  }
}

// Each worker prints the world it sees; in the world it waits for it ends, it succeeds.
std::string world_script(int succeed_at) {
  return fmt::format(
      "echo world $WORLD_SIZE rank $RANK nodes $GROUP_WORLD_SIZE restart $TANDEM_RESTART_COUNT; "
      "if [ $WORLD_SIZE = {} ]; then exit 0; fi; echo ready $$; exec sleep 1000",
      succeed_at);
}

TEST_F(TandemrunMultiNode, ElasticRunGoesOnWithTheRemainingNodeWhenANodeIsLost) {
  // World 4 waits; after node 1 is lost, node 0's workers run again in a world of 2.
  const std::vector<std::string> a_args{"--nproc-per-node", "2", "/bin/sh", "-c", world_script(2)};
  auto a = elastic_node(0, a_args);
  auto b = elastic_node(1, a_args);
  ASSERT_TRUE(wait_ready(*a, 2)) << a->err();
  ASSERT_TRUE(wait_ready(*b, 2)) << b->err();
  EXPECT_NE(a->out().find("[rank 0]: world 4 rank 0 nodes 2 restart 0\n"), std::string::npos)
      << a->out();
  // Node 1's host dies: its tandemrun is killed, and its workers with it.
  ASSERT_EQ(::kill(b->pid(), SIGKILL), 0);
  const auto ra = a->wait(kExit);
  ASSERT_FALSE(ra.timed_out);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  for (int rank : {0, 1}) {
    EXPECT_NE(ra.out.find(fmt::format("[rank {0}]: world 2 rank {0} nodes 1 restart 1\n", rank)),
              std::string::npos)
        << ra.out;
  }
  EXPECT_NE(ra.err.find("lost node 1 ("), std::string::npos) << ra.err;
  EXPECT_NE(ra.err.find("the run goes on with the 1 remaining node(s) in a new round"),
            std::string::npos)
      << ra.err;
  EXPECT_NE(ra.err.find("round 1: 1 node(s), world size 2; this is node 0 (ranks 0..1)"),
            std::string::npos)
      << ra.err;
  EXPECT_EQ(ra.err.find("===="), std::string::npos) << "no failure summary:\n" << ra.err;
  b->wait(kExit);
}

// --on-worker-loss continue: node 1's host dies (its tandemrun is killed, its workers go with
// it), and node 0's worker runs on without its rank; the run succeeds when that worker exits 0.
// The worker waits on a fifo that the test opens only once node 0 has said it goes on.
TEST_F(TandemrunMultiNode, UnderContinueALostNodeLeavesTheOtherNodesWorkersRunning) {
  char dir[] = "/tmp/tandem-mn-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string go = std::string(dir) + "/go";
  ASSERT_EQ(::mkfifo(go.c_str(), 0600), 0);
  const std::string script =
      fmt::format("echo ready $$; if [ $RANK = 0 ]; then exec cat {}; fi; exec sleep 1000", go);
  const std::vector<std::string> args{"--nproc-per-node",
                                      "1",
                                      "--monitor-interval",
                                      "0.2",
                                      "--on-worker-loss",
                                      "continue",
                                      "/bin/sh",
                                      "-c",
                                      script};
  auto a = node(0, args);
  auto b = node(1, args);
  ASSERT_TRUE(wait_ready(*a, 1)) << a->err();
  ASSERT_TRUE(wait_ready(*b, 1)) << b->err();
  ASSERT_EQ(::kill(b->pid(), SIGKILL), 0);
  const std::string goes_on =
      "the workers of this node go on without its ranks (--on-worker-loss continue)";
  ASSERT_TRUE(
      a->wait_for([&](const std::string&,
                      const std::string& err) { return err.find(goes_on) != std::string::npos; },
                  kExit))
      << a->err();
  // Only now may node 0's worker end: the fifo's reader (cat) is there, so this does not wait.
  const int fd = ::open(go.c_str(), O_WRONLY | O_NONBLOCK);
  EXPECT_GE(fd, 0) << "node 0's worker no longer reads " << go;
  if (fd >= 0) ::close(fd);
  const auto ra = a->wait(kExit);
  ::unlink(go.c_str());
  ::rmdir(dir);
  ASSERT_FALSE(ra.timed_out) << ra.err;
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_NE(ra.err.find("exited 0 after losing node 1 ("), std::string::npos) << ra.err;
  EXPECT_EQ(ra.err.find("===="), std::string::npos) << "no failure summary:\n" << ra.err;
  b->wait(kExit);
}

TEST_F(TandemrunMultiNode, ElasticRunAdmitsANodeThatStartsLate) {
  // World 1 waits; once node 1 is in, both nodes' workers run in a world of 2 and succeed.
  const std::vector<std::string> args{"--nproc-per-node", "1", "/bin/sh", "-c", world_script(2)};
  auto a = elastic_node(0, args);
  ASSERT_TRUE(wait_ready(*a, 1)) << a->err();
  EXPECT_NE(a->out().find("[rank 0]: world 1 rank 0 nodes 1 restart 0\n"), std::string::npos)
      << a->out();
  auto b = elastic_node(1, args);
  const auto ra = a->wait(kExit);
  const auto rb = b->wait(kExit);
  ASSERT_FALSE(ra.timed_out || rb.timed_out);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_NE(ra.out.find("[rank 0]: world 2 rank 0 nodes 2 restart 1\n"), std::string::npos)
      << ra.out;
  EXPECT_EQ(rb.out, "[rank 1]: world 2 rank 1 nodes 2 restart 1\n") << rb.err;
  EXPECT_NE(rb.err.find("round 0 of the run is under way with 1 node(s) (--nnodes 1:2): this "
                        "node waits to join the next one, which node 0 starts for it"),
            std::string::npos)
      << rb.err;
  EXPECT_NE(ra.err.find("is waiting to join the run: the run goes on with the 1 remaining "
                        "node(s) and 1 new in a new round"),
            std::string::npos)
      << ra.err;
  EXPECT_NE(rb.err.find("round 1: 2 node(s), world size 2; this is node 1 (ranks 1..1)"),
            std::string::npos)
      << rb.err;
}

TEST_F(TandemrunMultiNode, NodeWaitingToJoinAFullRunLeavesWhenTheRunEnds) {
  // Both nodes of --nnodes 1:2 are in: a third waits for a place, and leaves with the run's
  // outcome when the run ends (here stopped by SIGTERM to node 0).
  const std::vector<std::string> args{"--nproc-per-node", "1", "/bin/sh", "-c", kSleeper};
  auto a = elastic_node(0, args);
  auto b = elastic_node(1, args);
  ASSERT_TRUE(wait_ready(*a, 1)) << a->err();
  ASSERT_TRUE(wait_ready(*b, 1)) << b->err();
  auto c = elastic_node(1, {"--nproc-per-node", "1", "/bin/true"});
  ASSERT_TRUE(c->wait_for(
      [](const std::string&, const std::string& err) {
        return err.find("when a place is free (the run has its MAX nodes)") != std::string::npos;
      },
      kReady))
      << c->err();
  ASSERT_EQ(::kill(a->pid(), SIGTERM), 0);
  const auto ra = a->wait(kExit);
  const auto rb = b->wait(kExit);
  const auto rc = c->wait(kExit);
  ASSERT_FALSE(ra.timed_out || rb.timed_out || rc.timed_out);
  EXPECT_EQ(ra.exit_code, 128 + SIGTERM) << ra.err;
  EXPECT_EQ(rb.exit_code, 128 + SIGTERM) << rb.err;
  EXPECT_EQ(rc.exit_code, 1) << rc.err;
  EXPECT_EQ(rc.out, "") << "the late node started no worker";
  EXPECT_NE(rc.err.find("the run ended (exit code 143) before this node was admitted"),
            std::string::npos)
      << rc.err;
}

TEST_F(TandemrunMultiNode, TorchDistributedScriptRunsUnchangedOnTwoNodes) {
  std::string why;
  const std::string python = python_with_torch(&why);
  if (python.empty()) {
    GTEST_SKIP() << "python3 cannot import torch.distributed (" << why
                 << "); run scripts/python-env.sh (torch into .venv) to run this test";
  }
  TempDir dir;
  const std::string script = dir.file("allreduce.py");
  std::ofstream(script) << torch_allreduce_script();
  // Both "hosts" share a host name here, so Gloo is told its interface, as users do.
  const std::vector<std::string> env{"GLOO_SOCKET_IFNAME=" + NetnsPair::ifname()};
  auto a = node(0, {"--nproc-per-node", "2", python, script}, true, env);
  auto b = node(1, {"--nproc-per-node", "2", python, script}, true, env);
  const auto ra = a->wait(std::chrono::seconds(180));
  const auto rb = b->wait(std::chrono::seconds(180));
  ASSERT_FALSE(ra.timed_out || rb.timed_out);
  EXPECT_EQ(ra.exit_code, 0) << ra.out << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.out << rb.err;
  for (int rank : {0, 1, 2, 3}) {
    const auto& out = rank < 2 ? ra.out : rb.out;
    EXPECT_NE(out.find(fmt::format("[rank {0}]: rank {0}/4 allreduce 10 OK\n", rank)),
              std::string::npos)
        << out;
  }
}

}  // namespace
}  // namespace tandem::testing
