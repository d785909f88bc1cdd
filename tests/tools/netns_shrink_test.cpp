// Shrinking across two "hosts" (network namespaces joined by a veth pair), 2 ranks on each,
// started without a launcher (rank 0 hosts the store on host A): a lost host's ranks are
// shrunk away together and the other host's go on; a partition leaves the side with the store
// going on as a group of 2 and the side without it stopping with an error, never a second
// group.
#include "netns.hpp"
#include "subprocess.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

namespace tandem::testing {
namespace {

using namespace std::chrono_literals;

constexpr auto kReady = 90s;  // never-hang bounds, not timings
constexpr auto kExit = 150s;
constexpr int kPort = 29450;
std::atomic<int> run_counter{0};

std::string fault_worker_path() {
  return TANDEM_BINARY_DIR "/bin/fault_worker";
}

class NetnsShrink : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = NetnsPair::unavailable()) GTEST_SKIP() << "netns tests skipped: " << *why;
    try {
      pair_ = std::make_unique<NetnsPair>();
    } catch (const std::exception& e) {
      GTEST_SKIP() << "netns tests skipped: cannot make network namespaces: " << e.what();
    }
    marker_ = fmt::format("TANDEM_TEST_MARKER=ns-{}-{}", ::getpid(), run_counter++);
  }

  // Ranks 0 and 1 on host A, 2 and 3 on host B: fault_worker shrink, with TANDEM_TIMEOUT
  // `timeout_s`.
  void start(std::vector<std::string> env = {}, int timeout_s = 60) {
    for (int r = 0; r < 4; ++r) {
      std::vector<std::string> e = env;
      e.insert(e.end(),
               {fmt::format("RANK={}", r), "WORLD_SIZE=4", fmt::format("LOCAL_RANK={}", r % 2),
                "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=" + pair_->addr(0),
                fmt::format("MASTER_PORT={}", kPort), "TANDEM_STORE_TOKEN=netns-shrink-token",
                fmt::format("TANDEM_TIMEOUT={}", timeout_s), marker_});
      ranks_.push_back(std::make_unique<Subprocess>(
          pair_->exec_in(r / 2, {fault_worker_path(), "shrink", "-", "-", "100000000"}), e));
    }
    for (auto& p : ranks_)
      ASSERT_TRUE(
          p->wait_for([](const std::string& out,
                         const std::string&) { return out.find(": ready") != std::string::npos; },
                      kReady))
          << p->out() << p->err();
  }

  // Waits for rank r (0 or 1), which must exit 0 after shrinking without ranks 2 and 3;
  // returns its output.
  std::string expect_shrunk_without_host_b(int r) {
    const auto res = ranks_[static_cast<std::size_t>(r)]->wait(kExit);
    EXPECT_FALSE(res.timed_out) << res.out << res.err;
    EXPECT_EQ(res.exit_code, 0) << res.out << res.err;
    EXPECT_NE(res.out.find(fmt::format("rank {}: shrunk to rank {} of 2 without [2,3]", r, r)),
              std::string::npos)
        << res.out << res.err;
    return res.out;
  }

  std::unique_ptr<NetnsPair> pair_;
  std::string marker_;
  std::vector<std::unique_ptr<Subprocess>> ranks_;
};

// Host B's two ranks are SIGKILLed together: ranks 0 and 1 agree on both, shrink to a group of
// 2 and go on.
TEST_F(NetnsShrink, ALostHostsRanksAreShrunkAwayTogether) {
  ASSERT_NO_FATAL_FAILURE(start());
  for (int r : {2, 3}) ASSERT_EQ(::kill(ranks_[static_cast<std::size_t>(r)]->pid(), SIGKILL), 0);
  for (int r : {0, 1}) {
    const std::string out = expect_shrunk_without_host_b(r);
    EXPECT_NE(out.find(fmt::format("rank {}: went on with 2 ranks", r)), std::string::npos) << out;
  }
  for (int r : {2, 3}) (void)ranks_[static_cast<std::size_t>(r)]->wait(kExit);
}

// The link is cut: the side with the store (host A) leaves host B's ranks out once its wait
// for them (5 s) ends and goes on as a group of 2; host B's ranks, which cannot reach the
// store, stop with an error naming it. Neither side forms a group with the other's ranks.
TEST_F(NetnsShrink, APartitionLeavesTheSideWithoutTheStoreStoppingWithAnError) {
  // Host B's store requests fail at the timeout, 20 s; host A's ranks hear of the cut from
  // their connections' keepalive first.
  ASSERT_NO_FATAL_FAILURE(start({"SHRINK_WAIT_MS=5000"}, 20));
  const auto r = run_process(
      {NetnsPair::ip_path(), "-n", pair_->ns(1), "link", "set", NetnsPair::ifname(), "down"}, {},
      30s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int k : {0, 1}) (void)expect_shrunk_without_host_b(k);
  for (int k : {2, 3}) {
    const auto res = ranks_[static_cast<std::size_t>(k)]->wait(kExit);
    ASSERT_FALSE(res.timed_out) << res.out << res.err;
    EXPECT_EQ(res.exit_code, 1) << res.out << res.err;
    EXPECT_EQ(res.out.find("went on"), std::string::npos) << res.out;
    EXPECT_NE(
        res.err.find(fmt::format("fault_worker: rank {}: [Io] the connection to the store", k)),
        std::string::npos)
        << res.err;
    std::printf("rank %d: %s", k, res.err.c_str());
  }
}

}  // namespace
}  // namespace tandem::testing
