#pragma once
// Multi-process test harness: forks N ranks (plus one process hosting the TcpStore) from a
// single-threaded parent, runs a function in each rank, and reaps them all under a
// deadline. Nothing here sleeps: the parent waits on pidfds with poll().
//
// Inside a rank, use gtest's EXPECT_*/ASSERT_* as usual: the rank's exit status is 1 when
// any assertion failed or an exception escaped (its message is printed), 0 otherwise.

#include <tandem/store.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tandem::testing {

struct RankContext {
  int rank = 0;
  int size = 0;
  std::uint16_t store_port = 0;
  std::string store_token;
  /// A fresh client of the test's store.
  std::shared_ptr<store::Store> store() const;
};

struct RankExit {
  int rank = 0;
  int pid = 0;
  bool exited = false;  ///< exited normally (exit_code valid)
  int exit_code = -1;
  int signal = 0;          ///< terminating signal, when !exited
  bool timed_out = false;  ///< still running at the deadline (then killed)
  double seconds = 0;      ///< from fork to exit
  bool ok() const { return exited && exit_code == 0 && !timed_out; }
};

struct RunOptions {
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};
  /// Extra environment for every rank, "NAME=value".
  std::vector<std::string> env;
  /// Token the store requires (empty: none).
  std::string store_token = "test-token";
};

/// Runs `fn` in `n` forked ranks. Returns one RankExit per rank, in rank order.
std::vector<RankExit> run_ranks(int n, const std::function<void(const RankContext&)>& fn,
                                const RunOptions& options = {});

/// gtest helper: EXPECT that every rank exited 0 (prints each failure).
void expect_all_ok(const std::vector<RankExit>& exits);

/// Human-readable summary of one exit ("rank 1 (pid 123): killed by SIGKILL after 0.5 s").
std::string describe(const RankExit& e);

}  // namespace tandem::testing
