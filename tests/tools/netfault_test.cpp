// Network faults between two "hosts" (network namespaces joined by a veth pair). A link cut in
// the middle of an allreduce fails every rank with PeerLost naming the rank across it, well
// before TANDEM_TIMEOUT, and the tandemrun of each node exits non-zero naming a rank; with
// tandemrun's own heartbeat left at its default, each tandemrun names the other node. A link
// rate-limited with tbf (packets queued, dropped and retransmitted) still gives exact results
// for every collective and size, with one data stream per peer and with four (allreduce with
// two ranks per node: the hierarchical algorithm).
#include "netns.hpp"
#include "subprocess.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <unistd.h>

namespace tandem::testing {
namespace {

using namespace std::chrono_literals;

// Never-hang bounds, not timings.
constexpr auto kReady = 90s;    // both nodes started and their workers connected
constexpr auto kTraffic = 60s;  // the first bytes of the allreduce loop crossed the link
constexpr auto kDetect = 50s;   // cut link -> error on every rank (TANDEM_TIMEOUT is 60)
constexpr auto kExit = 180s;    // error -> tandemrun gave up on the other node and exited
constexpr int kPort = 29400;
constexpr std::uint64_t kFlowing = 64u << 20;  // bytes sent over the link after the table header

std::atomic<int> run_counter{0};

std::string tc_path() {
  for (const char* p : {"/usr/sbin/tc", "/sbin/tc", "/usr/bin/tc", "/bin/tc"})
    if (::access(p, X_OK) == 0) return p;
  return {};
}

class NetFault : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = NetnsPair::unavailable()) {
      GTEST_SKIP() << "network fault tests skipped: " << *why;
    }
    // A pair per test: a test cuts its link or shapes it.
    try {
      pair_ = std::make_unique<NetnsPair>();
    } catch (const std::exception& e) {
      GTEST_SKIP() << "network fault tests skipped: cannot make network namespaces: " << e.what();
    }
    marker_ = fmt::format("TANDEM_TEST_MARKER=nf-{}-{}", ::getpid(), run_counter++);
  }

  void TearDown() override {
    if (pair_) {
      EXPECT_TRUE(no_process_left()) << "processes of the run are left behind";
    }
    pair_.reset();
  }

  // tandemrun on node i: the same command on both nodes except --node-rank.
  std::unique_ptr<Subprocess> node(int i, const std::vector<std::string>& args,
                                   std::vector<std::string> env = {}) const {
    std::vector<std::string> argv{tandemrun_path(),      "--nnodes",     "2",
                                  "--master-addr",       pair_->addr(0), "--master-port",
                                  std::to_string(kPort), "--node-rank",  std::to_string(i)};
    argv.insert(argv.end(), args.begin(), args.end());
    env.push_back("TANDEM_STORE_TOKEN=netfault-test-token");
    env.push_back(marker_);
    return std::make_unique<Subprocess>(pair_->exec_in(i, argv), env);
  }

  // Runs `tool` (the path of iproute2's ip or tc) with -n for node i; fails the test when it fails.
  void must(const std::string& tool, int i, std::vector<std::string> args) const {
    args.insert(args.begin(), {tool, "-n", pair_->ns(i)});
    const auto r = run_process(args, {}, 30s);
    std::string cmd;
    for (const auto& a : args) cmd += " " + a;
    ASSERT_EQ(r.exit_code, 0) << cmd << ": " << r.err;
  }

  // Bytes node i has sent over the link.
  std::uint64_t tx_bytes(int i) const {
    const auto r = run_process(
        pair_->exec_in(i, {"/bin/cat", fmt::format("/sys/class/net/{}/statistics/tx_bytes",
                                                   NetnsPair::ifname())}),
        {}, 30s);
    return r.exit_code == 0 ? std::stoull(r.out) : 0;
  }

  // Bounded wait until node i has sent `bytes` more than `from` over the link.
  bool wait_sent(int i, std::uint64_t from, std::uint64_t bytes) const {
    const Deadline deadline = deadline_in(kTraffic);
    while (tx_bytes(i) < from + bytes) {
      if (Clock::now() >= deadline) return false;
      ::usleep(20000);
    }
    return true;
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

  void link_cut_mid_allreduce(std::vector<std::string> env);

  std::unique_ptr<NetnsPair> pair_;
  std::string marker_;
};

// "[rank R]: tandem-perf: rank R: [Code] ..." lines: the error each worker ended with.
std::map<int, std::string> worker_errors(const std::string& text) {
  static const std::regex kLine(R"(^\[rank (\d+)\]: tandem-perf: rank \d+: (\[\w+\] .*)$)");
  std::map<int, std::string> m;
  for (const auto& line : split_lines(text)) {
    std::smatch sm;
    if (std::regex_match(line, sm, kLine)) m.emplace(std::stoi(sm[1]), sm[2]);
  }
  return m;
}

// One rank per node: the ring crosses the link both ways. The tandemruns' heartbeat would
// notice the cut first (a node silent for 5 intervals is lost) and stop the workers; with 30 s
// intervals the workers' own detection is what is tested. `env`: the transport's settings.
void NetFault::link_cut_mid_allreduce(std::vector<std::string> env) {
  const std::vector<std::string> args{"--nproc-per-node",
                                      "1",
                                      "--monitor-interval",
                                      "30",
                                      "--grace-period",
                                      "2",
                                      tandem_perf_path(),
                                      "-c",
                                      "allreduce",
                                      "-b",
                                      "4M",
                                      "-e",
                                      "4M",
                                      "-n",
                                      "1000000",
                                      "-w",
                                      "1"};
  env.emplace_back("TANDEM_TIMEOUT=60");
  auto a = node(0, args, env);
  auto b = node(1, args, env);
  ASSERT_TRUE(a->wait_for([](const std::string& out,
                             const std::string&) { return out.find("(B)") != std::string::npos; },
                          kReady))
      << a->out() << a->err() << b->out() << b->err();
  // The table header comes before the first collective: wait until the loop moves data.
  ASSERT_TRUE(wait_sent(0, tx_bytes(0), kFlowing)) << a->out() << a->err();

  ASSERT_NO_FATAL_FAILURE(
      must(NetnsPair::ip_path(), 1, {"link", "set", NetnsPair::ifname(), "down"}));
  const auto cut = Clock::now();
  const Deadline detect_by = cut + kDetect;
  double detected[2] = {0, 0};
  for (int i : {0, 1}) {
    Subprocess& p = i == 0 ? *a : *b;
    const bool failed =
        p.wait_for([i](const std::string& out,
                       const std::string& err) { return worker_errors(out + err).count(i) != 0; },
                   std::chrono::ceil<std::chrono::milliseconds>(
                       std::max(detect_by - Clock::now(), Clock::duration::zero())));
    ASSERT_TRUE(failed) << "rank " << i
                        << " did not fail within the bound after the link was cut:\n"
                        << p.out() << p.err();
    detected[i] = std::chrono::duration<double>(Clock::now() - cut).count();
  }
  std::cout << fmt::format(
      "[ info ] link cut noticed by rank 0 after {:.1f} s, rank 1 after {:.1f} s\n", detected[0],
      detected[1]);

  const auto ra = a->wait(kExit);
  const auto rb = b->wait(kExit);
  ASSERT_FALSE(ra.timed_out || rb.timed_out) << ra.err << rb.err;
  for (int i : {0, 1}) {
    const auto& r = i == 0 ? ra : rb;
    const std::string error = worker_errors(r.out + r.err).at(i);
    // Found by the link's liveness check (PeerLost), not by TANDEM_TIMEOUT (Timeout).
    EXPECT_TRUE(std::regex_search(
        error,
        std::regex(fmt::format(
            R"(^\[PeerLost\] allreduce #\d+ \(f32 x 1048576, \w+\) failed: .*rank {} \(host )",
            1 - i))))
        << "rank " << i << " names rank " << 1 - i << ":\n"
        << error;
    EXPECT_EQ(r.exit_code, 1) << r.err;
    const std::string s = failure_summary(r.err);
    EXPECT_TRUE(s.find(fmt::format("rank      : {} ", i)) != std::string::npos ||
                s.find(fmt::format("rank {} (pid ", i)) != std::string::npos)
        << "node " << i << "'s tandemrun names its rank:\n"
        << r.err;
  }
}

TEST_F(NetFault, LinkCutMidAllreduceFailsEveryRankWithPeerLostNamingTheRankAcrossIt) {
  link_cut_mid_allreduce({});
}

#if TANDEM_HAVE_UCX
// The same over UCX's tcp transport: UCX moves the data, tandem's control connection still
// watches the peer, so the cut is named as on tandem's own tcp.
TEST_F(NetFault, LinkCutMidAllreduceOverUcxFailsEveryRankWithPeerLost) {
  link_cut_mid_allreduce({"TANDEM_TRANSPORT=ucx", "UCX_TLS=tcp"});
}

// Every collective between the two hosts over UCX (its tcp transport: no RDMA here), two ranks
// per host (shared memory inside a host, UCX across), every result checked.
TEST_F(NetFault, EveryCollectiveOverUcxBetweenHostsIsExact) {
  for (const char* collective : {"allreduce", "broadcast", "reduce", "allgather", "reduce_scatter",
                                 "alltoall", "sendrecv", "barrier"}) {
    const std::vector<std::string> args{"--nproc-per-node",
                                        "2",
                                        tandem_perf_path(),
                                        "-c",
                                        collective,
                                        "-b",
                                        "8",
                                        "-e",
                                        "4M",
                                        "-f",
                                        "16",
                                        "-n",
                                        "3",
                                        "-w",
                                        "1",
                                        "-d",
                                        "all"};
    const std::vector<std::string> env{"TANDEM_TIMEOUT=60", "TANDEM_TRANSPORT=ucx", "UCX_TLS=tcp",
                                       "TANDEM_DEBUG=INFO"};
    auto a = node(0, args, env);
    auto b = node(1, args, env);
    const auto ra = a->wait(kExit);
    const auto rb = b->wait(kExit);
    ASSERT_FALSE(ra.timed_out || rb.timed_out) << collective << ra.out << ra.err;
    EXPECT_EQ(ra.exit_code, 0) << collective << "\n" << ra.out << ra.err << rb.out << rb.err;
    EXPECT_EQ(rb.exit_code, 0) << collective << "\n" << rb.out << rb.err;
    EXPECT_NE(ra.out.find("Out of bounds values : 0 OK"), std::string::npos) << collective << "\n"
                                                                             << ra.out;
    EXPECT_NE(ra.out.find("shm to 1 peer(s) (1); ucx to 2 peer(s) (2,3)"), std::string::npos)
        << collective << "\n"
        << ra.out;
    // TANDEM_DEBUG=INFO names UCX's transport and device per peer.
    EXPECT_NE(
        ra.err.find(fmt::format("ucx to [2 via tcp/{0}, 3 via tcp/{0}]", NetnsPair::ifname())),
        std::string::npos)
        << ra.err;
  }
}
#endif

TEST_F(NetFault, LinkCutIsNoticedByTheTandemrunOfEachNode) {
  const std::vector<std::string> args{"--nproc-per-node",
                                      "1",
                                      "--grace-period",
                                      "1",
                                      "/bin/sh",
                                      "-c",
                                      "echo ready $$; exec sleep 1000"};
  const auto started = Clock::now();
  auto a = node(0, args);
  auto b = node(1, args);
  for (Subprocess* p : {a.get(), b.get()}) {
    ASSERT_TRUE(
        p->wait_for([](const std::string& out,
                       const std::string&) { return out.find("ready") != std::string::npos; },
                    kReady))
        << p->out() << p->err();
  }
  ASSERT_NO_FATAL_FAILURE(
      must(NetnsPair::ip_path(), 0, {"link", "set", NetnsPair::ifname(), "down"}));
  const double cut = std::chrono::duration<double>(Clock::now() - started).count();
  const auto ra = a->wait(kExit);
  const auto rb = b->wait(kExit);
  ASSERT_FALSE(ra.timed_out || rb.timed_out) << ra.err << rb.err;
  std::cout << fmt::format(
      "[ info ] link cut: node 0's tandemrun exited {:.1f} s later, node 1's {:.1f} s later\n",
      ra.seconds - cut, rb.seconds - cut);
  EXPECT_EQ(ra.exit_code, 1) << ra.err;
  EXPECT_EQ(rb.exit_code, 1) << rb.err;
  const std::string sa = failure_summary(ra.err), sb = failure_summary(rb.err);
  EXPECT_NE(sa.find("node 1 ("), std::string::npos) << ra.err;
  EXPECT_NE(sa.find("no heartbeat"), std::string::npos) << sa;
  EXPECT_NE(sb.find("node 0 ("), std::string::npos) << rb.err;
  EXPECT_NE(sb.find(fmt::format("hosting the store at {}:{} is gone", pair_->addr(0), kPort)),
            std::string::npos)
      << sb;
}

// A collective and the number of tcp data streams per peer.
struct Shaped {
  const char* collective;
  int streams;
};

void PrintTo(const Shaped& s, std::ostream* os) {
  *os << s.collective << " over " << s.streams << " stream(s)";
}

class RateLimitedLink : public NetFault, public ::testing::WithParamInterface<Shaped> {};

// Every size 8 B .. 8 MiB by 4x, except those the collective cannot split over 4 ranks.
std::vector<std::uint64_t> expected_sizes(const std::string& collective) {
  const bool per_rank =
      collective == "allgather" || collective == "reduce_scatter" || collective == "alltoall";
  std::vector<std::uint64_t> sizes;
  for (std::uint64_t s = 8; s <= (8u << 20); s *= 4)
    if (!per_rank || s % (4 * sizeof(float)) == 0) sizes.push_back(s);
  return sizes;
}

TEST_P(RateLimitedLink, EveryCollectiveAndSizeIsExact) {
  if (tc_path().empty()) {
    GTEST_SKIP() << "tc (iproute2) is not installed";
  }
  const Shaped p = GetParam();
  // Both directions: 200 Mbit/s, with a queue of at most 20 ms before tbf drops packets (so
  // the large sizes also see losses and retransmissions).
  for (int i : {0, 1}) {
    ASSERT_NO_FATAL_FAILURE(must(tc_path(), i,
                                 {"qdisc", "add", "dev", NetnsPair::ifname(), "root", "tbf", "rate",
                                  "200mbit", "burst", "64kb", "latency", "20ms"}));
  }
  const std::vector<std::string> args{"--nproc-per-node",
                                      "2",
                                      tandem_perf_path(),
                                      "-c",
                                      p.collective,
                                      "-b",
                                      "8",
                                      "-e",
                                      "8M",
                                      "-f",
                                      "4",
                                      "-n",
                                      "3",
                                      "-w",
                                      "1"};
  const std::vector<std::string> env{"TANDEM_TIMEOUT=120",
                                     fmt::format("TANDEM_SOCKETS_PER_PEER={}", p.streams)};
  auto a = node(0, args, env);
  auto b = node(1, args, env);
  const auto ra = a->wait(kExit);
  const auto rb = b->wait(kExit);
  ASSERT_FALSE(ra.timed_out || rb.timed_out) << ra.out << ra.err << rb.out << rb.err;
  EXPECT_EQ(ra.exit_code, 0) << ra.out << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.out << rb.err;
  EXPECT_NE(ra.out.find("tcp to 2 peer"), std::string::npos) << ra.out;

  // Rows: size count type redop root, then time p50 algbw busbw #wrong out of place and in
  // place (N/A where there is none), then the algorithm.
  static const std::regex kRow(R"(^\[rank 0\]:\s+(\d+)\s+\d+\s+\S+\s+\S+\s+-?\d+\s+(.*)$)");
  std::vector<std::uint64_t> sizes;
  std::string busbw, last_time;
  for (const auto& line : split_lines(ra.out)) {
    std::smatch m;
    if (!std::regex_match(line, m, kRow)) continue;
    sizes.push_back(std::stoull(m[1]));
    std::vector<std::string> cols;
    std::istringstream rest(m[2].str());
    for (std::string c; rest >> c;) cols.push_back(c);
    ASSERT_EQ(cols.size(), 11u) << line;
    EXPECT_EQ(cols[4], "0") << "wrong results out of place: " << line;
    EXPECT_TRUE(cols[9] == "0" || cols[9] == "N/A") << "wrong results in place: " << line;
    // Two ranks per namespace: from 16 KiB on, allreduce keeps half its work inside a host.
    if (std::string(p.collective) == "allreduce" && sizes.back() >= (16u << 10)) {
      EXPECT_EQ(cols[10], "hierarchical") << line;
    }
    busbw = cols[3];
    last_time = cols[0];
  }
  EXPECT_EQ(sizes, expected_sizes(p.collective)) << ra.out;
  EXPECT_NE(ra.out.find("Out of bounds values : 0 OK"), std::string::npos) << ra.out;
  // Informative: the largest size's bus bandwidth (GB/s, as printed) and its algbw in MB/s.
  const double mbps = sizes.empty() || last_time.empty()
                          ? 0.0
                          : static_cast<double>(sizes.back()) / std::stod(last_time);
  std::cout << fmt::format(
      "[ info ] {} with {} stream(s) over 200 Mbit/s: at 8 MiB busbw {} GB/s, algbw {:.1f} MB/s\n",
      p.collective, p.streams, busbw, mbps);
  for (int i : {0, 1}) {
    const auto r = run_process(
        {tc_path(), "-n", pair_->ns(i), "-s", "qdisc", "show", "dev", NetnsPair::ifname()}, {},
        30s);
    static const std::regex kDropped(R"(dropped (\d+))");
    std::smatch m;
    if (std::regex_search(r.out, m, kDropped))
      std::cout << fmt::format("[ info ] node {}: tbf dropped {} packets\n", i, m[1].str());
  }
}

INSTANTIATE_TEST_SUITE_P(Tbf, RateLimitedLink,
                         ::testing::Values(Shaped{"allreduce", 1}, Shaped{"allgather", 1},
                                           Shaped{"broadcast", 1}, Shaped{"reduce_scatter", 1},
                                           Shaped{"alltoall", 1}, Shaped{"allreduce", 4},
                                           Shaped{"allgather", 4}, Shaped{"broadcast", 4},
                                           Shaped{"reduce_scatter", 4}, Shaped{"alltoall", 4}),
                         [](const ::testing::TestParamInfo<Shaped>& param_info) {
                           return fmt::format("{}_{}_streams", param_info.param.collective,
                                              param_info.param.streams);
                         });

}  // namespace
}  // namespace tandem::testing
