// A rank SIGKILLed at any moment — at each step of communicator setup, between collectives,
// inside a split, with a forked child holding its sockets — makes every survivor fail with
// PeerLost naming it, within seconds (the mid-collective case is in fault_test.cpp). The 10 s
// bounds are never-hang checks: with TANDEM_TIMEOUT=60 a missed detection would only end at the
// timeout.

#include "mp_util.hpp"
#include "support/temp_dir.hpp"
#include "transport/bootstrap.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fcntl.h>
#include <fstream>
#include <signal.h>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace tandem::mptest {
namespace {

using namespace std::chrono_literals;

constexpr double kDetectBound = 10.0;

// The setup step at which the rank that installs kill_at_step() dies.
std::string g_kill_step;

void kill_at_step(std::string_view step) {
  if (step == g_kill_step) ::raise(SIGKILL);
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool contains(const std::string& s, std::string_view what) {
  return s.find(what) != std::string::npos;
}

// Runs `body`, which must fail with PeerLost naming rank 1 within kDetectBound seconds.
void expect_peer_lost(const testing::RankContext& ctx, const std::function<void()>& body,
                      std::string_view where) {
  const auto start = Clock::now();
  try {
    body();
    ADD_FAILURE() << "rank " << ctx.rank << " " << where << ": succeeded although rank 1 died";
  } catch (const Error& e) {
    const double took = seconds_since(start);
    EXPECT_EQ(e.code(), ErrorCode::PeerLost) << e.what();
    EXPECT_TRUE(contains(e.message(), "rank 1")) << e.what();
    EXPECT_LT(took, kDetectBound) << e.what();
    std::printf("rank %d %s: PeerLost after %.3f s: %s\n", ctx.rank, std::string(where).c_str(),
                took, e.message().c_str());
  }
}

struct SetupCase {
  std::string transport;
  std::string step;
};

class KilledDuringSetup : public ::testing::TestWithParam<SetupCase> {};

TEST_P(KilledDuringSetup, SurvivorsFailWithPeerLost) {
  const auto& p = GetParam();
  const auto exits = testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        if (ctx.rank == 1) {
          g_kill_step = p.step;
          transport::testing::setup_step_hook = kill_at_step;
          auto comm = connect(ctx);
          ADD_FAILURE() << "rank 1 survived setup step '" << p.step << "'";
          return;
        }
        std::vector<float> v(1024, 1.0f);
        expect_peer_lost(
            ctx,
            [&] {
              auto comm = connect(ctx);
              // Setup may complete before the death is visible: the first collective fails.
              comm->allreduce(BufferView::of(std::span<float>(v)), ReduceOp::sum);
            },
            fmt::format("(rank 1 killed at setup step '{}')", p.step));
      },
      run_options(p.transport));
  ASSERT_EQ(exits.size(), 3u);
  EXPECT_TRUE(exits[0].ok()) << testing::describe(exits[0]);
  EXPECT_EQ(exits[1].signal, SIGKILL) << testing::describe(exits[1]);
  EXPECT_TRUE(exits[2].ok()) << testing::describe(exits[2]);
}

std::vector<SetupCase> setup_cases() {
  std::vector<SetupCase> cases;
  for (const char* t : {"shm", "tcp"})
    for (const char* s : {"start", "published addresses", "gathered addresses",
                          "connected setup peers", "exchanged records", "connected"})
      cases.push_back({t, s});
  cases.push_back({"shm", "published shared-memory segment names"});
  cases.push_back({"shm", "gathered shared-memory segment names"});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Steps, KilledDuringSetup, ::testing::ValuesIn(setup_cases()),
                         [](const auto& test) {
                           std::string name = test.param.transport + "_" + test.param.step;
                           for (char& c : name)
                             if (c == ' ' || c == '-') c = '_';
                           return name;
                         });

class Killed : public ::testing::TestWithParam<std::string> {};

// The survivors are between collectives when rank 1 dies; they learn of it from the store
// (not by waiting), and their next collective fails at once, naming the rank and the call.
TEST_P(Killed, BetweenCollectivesTheNextCallFails) {
  const auto exits = testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        std::vector<float> v(1024, 1.0f);
        auto view = BufferView::of(std::span<float>(v));
        comm->allreduce(view, ReduceOp::sum);
        if (ctx.rank == 1) ::raise(SIGKILL);
        const std::string lost = comm->store()->get("tandem/r0/world/lost");
        EXPECT_TRUE(contains(lost, "rank 1")) << lost;
        expect_peer_lost(
            ctx, [&] { comm->allreduce(view, ReduceOp::sum); }, "in allreduce #1");
        try {
          comm->barrier();
        } catch (const Error& e) {
          EXPECT_TRUE(contains(e.message(), "allreduce #1")) << e.what();
          EXPECT_TRUE(contains(e.message(), "host ")) << e.what();
        }
      },
      run_options(GetParam()));
  ASSERT_EQ(exits.size(), 3u);
  EXPECT_TRUE(exits[0].ok()) << testing::describe(exits[0]);
  EXPECT_EQ(exits[1].signal, SIGKILL) << testing::describe(exits[1]);
  EXPECT_TRUE(exits[2].ok()) << testing::describe(exits[2]);
}

// Rank 1 dies inside split(), while the new group exchanges its addresses through the store:
// the others are waiting on store keys, not on a socket to rank 1.
TEST_P(Killed, InsideSplitSetup) {
  const auto exits = testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        if (ctx.rank == 1) {
          g_kill_step = "published addresses";
          transport::testing::setup_step_hook = kill_at_step;
        }
        expect_peer_lost(
            ctx, [&] { auto sub = comm->split(0, ctx.rank); }, "in split");
      },
      run_options(GetParam()));
  ASSERT_EQ(exits.size(), 3u);
  EXPECT_TRUE(exits[0].ok()) << testing::describe(exits[0]);
  EXPECT_EQ(exits[1].signal, SIGKILL) << testing::describe(exits[1]);
  EXPECT_TRUE(exits[2].ok()) << testing::describe(exits[2]);
}

// A normal end is not a death: after rank 1 destroys its communicator and exits, the others
// still create and use new communicators over the same store.
TEST_P(Killed, NormalExitIsNotALoss) {
  const auto exits = testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        {
          auto comm = connect(ctx);
          comm->barrier();
        }
        auto store = ctx.store();
        store->set(fmt::format("closed/{}", ctx.rank), "1");
        const std::vector<std::string> keys{"closed/0", "closed/1", "closed/2"};
        store->wait(keys);
        EXPECT_FALSE(store->check(std::vector<std::string>{"tandem/r0/world/lost"}));
      },
      run_options(GetParam()));
  for (const auto& e : exits) EXPECT_TRUE(e.ok()) << testing::describe(e);
}

// The default check (a fingerprint in every message, no extra traffic): every rank fails
// with an error that shows both calls, the one it made and the one it met.
TEST_P(Killed, MismatchShowsBothCallsOnEveryRank) {
  const auto exits = testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        std::vector<float> v(1000, 1.0f);
        auto view = BufferView::of(std::span<float>(v));
        comm->allreduce(view, ReduceOp::sum);
        const auto start = Clock::now();
        try {
          if (ctx.rank == 2)
            comm->broadcast(view, 0);
          else
            comm->allreduce(view, ReduceOp::sum);
          ADD_FAILURE() << "rank " << ctx.rank << ": the mismatched call succeeded";
        } catch (const Error& e) {
          EXPECT_LT(seconds_since(start), kDetectBound) << e.what();
          EXPECT_TRUE(e.code() == ErrorCode::Mismatch || e.code() == ErrorCode::Aborted)
              << e.what();
          // Found by a message meeting the wrong receive (the fingerprint), or by the
          // monitors when every rank waits: either way the error shows both calls.
          // (A rank's report may be up to half a second old: "ranks 0,1 called allreduce"
          // can read "rank 1 called allreduce ...; rank 0 is still in allreduce #0".)
          EXPECT_TRUE(contains(e.message(), "called allreduce (f32 x 1000)")) << e.what();
          EXPECT_TRUE(contains(e.message(), "rank 2 called broadcast (f32 x 1000, root 0)"))
              << e.what();
          std::printf("rank %d after %.3f s: %s\n", ctx.rank, seconds_since(start), e.what());
        }
      },
      run_options(GetParam()));
  for (const auto& e : exits) EXPECT_TRUE(e.ok()) << testing::describe(e);
}

// Setup waits for a late rank inside one store request, which a death would end at once,
// rather than asking the store again every 250 ms: however late the last rank starts, the
// others' setup costs the same few requests (at most 8: docs/scale.md). The delay only makes
// the wait long; nothing depends on its timing.
TEST_P(Killed, ALateRankCostsTheOthersNoStoreRequests) {
  constexpr int kRanks = 4;
  const auto exits = testing::run_ranks(
      kRanks,
      [&](const testing::RankContext& ctx) {
        if (ctx.rank == kRanks - 1) std::this_thread::sleep_for(1500ms);
        log::reload_from_env();
        auto store = ctx.store();
        const std::uint64_t before = store->requests();
        auto comm = Communicator::create(store, ctx.rank, ctx.size);
        const std::uint64_t used = store->requests() - before;
        EXPECT_LE(used, 8u) << "rank " << ctx.rank;
        std::printf("rank %d: setup made %llu store requests\n", ctx.rank,
                    static_cast<unsigned long long>(used));
        std::vector<float> v(16, 1.0f);
        comm->allreduce(BufferView::of(std::span<float>(v)), ReduceOp::sum);
        EXPECT_EQ(v[0], static_cast<float>(kRanks));
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

INSTANTIATE_TEST_SUITE_P(Transports, Killed, ::testing::Values("shm", "tcp"));

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Rank 0 writes its log lines (stderr) to `path`.
void log_to(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ::dup2(fd, STDERR_FILENO);
  ::close(fd);
}

// Waits for the stall warning in `log` (a condition, polled with a deadline), not for a time.
void wait_for_stall_warning(const std::string& log) {
  const auto deadline = Clock::now() + 30s;
  while (read_file(log).find("has not completed") == std::string::npos) {
    ASSERT_LT(Clock::now(), deadline) << "no stall warning in " << read_file(log);
    std::this_thread::sleep_for(20ms);
  }
}

// On one host a rank's death is seen through its shared-memory life lock, which the kernel
// releases as the process ends: a child it forked that keeps its sockets and its store
// connection open (as a DataLoader worker does) does not hide it. The child ends only once
// both survivors have seen the death (rank 0 then opens the fifo it waits on), so nothing
// else can have told them: without the lock they would wait for TANDEM_TIMEOUT.
TEST(KilledOnOneHost, AForkedChildHoldingTheDeadRanksSocketsDoesNotHideItsDeath) {
  testing::TempDir dir;
  const std::string release = dir.fifo("release");
  const auto exits = testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        auto store = ctx.store();
        std::vector<float> v(1024, 1.0f);
        auto view = BufferView::of(std::span<float>(v));
        comm->allreduce(view, ReduceOp::sum);
        if (ctx.rank == 1) {
          if (::fork() == 0) {  // only async-signal-safe calls here
            ::alarm(120);       // outlives a failed test by at most this
            const int fd = ::open(release.c_str(), O_RDONLY);  // returns once rank 0 opens it
            ::_exit(fd >= 0 ? 0 : 1);
          }
          ::raise(SIGKILL);
        }
        std::string lost;
        expect_peer_lost(
            ctx,
            [&] {
              try {
                comm->allreduce(view, ReduceOp::sum);
              } catch (const Error& e) {
                lost = e.message();
                throw;
              }
            },
            "in allreduce #1");
        EXPECT_TRUE(contains(lost, "the kernel released the shared-memory lock")) << lost;
        store->set(fmt::format("seen/{}", ctx.rank), "1");
        if (ctx.rank != 0) return;
        store->wait(std::vector<std::string>{"seen/0", "seen/2"});
        const int fd = ::open(release.c_str(), O_WRONLY | O_NONBLOCK);
        EXPECT_GE(fd, 0) << "the dead rank's child is no longer waiting";
        if (fd >= 0) ::close(fd);
      },
      run_options("shm"));
  ASSERT_EQ(exits.size(), 3u);
  EXPECT_TRUE(exits[0].ok()) << testing::describe(exits[0]);
  EXPECT_EQ(exits[1].signal, SIGKILL) << testing::describe(exits[1]);
  EXPECT_TRUE(exits[2].ok()) << testing::describe(exits[2]);
}

// TANDEM_STALL_WARN: rank 2 stays out of allreduce #1 until rank 0 has logged who is
// missing; then it joins and the collective completes normally.
TEST(Stall, WarningNamesTheRanksThatHaveNotEntered) {
  tandem::testing::TempDir dir;
  const std::string log = dir.file("rank0.log");
  const auto exits = testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        if (ctx.rank == 0) log_to(log);
        auto comm = connect(ctx);
        std::vector<float> v(1024, 1.0f);
        auto view = BufferView::of(std::span<float>(v));
        comm->allreduce(view, ReduceOp::sum);
        if (ctx.rank == 2) wait_for_stall_warning(log);
        std::fill(v.begin(), v.end(), 1.0f);
        comm->allreduce(view, ReduceOp::sum);
        EXPECT_EQ(v[0], 3.0f);
        if (ctx.rank != 0) return;
        const std::string text = read_file(log);
        EXPECT_TRUE(contains(text, "allreduce #1 (f32 x 1024) has not completed after")) << text;
        EXPECT_TRUE(contains(text, "ranks 0,1 waiting in it since")) << text;
        EXPECT_TRUE(contains(text, "rank 2 never entered it (last completed #0)")) << text;
        EXPECT_TRUE(contains(text, "TANDEM_STALL_WARN")) << text;
      },
      run_options("shm", {"TANDEM_STALL_WARN=0.3"}));
  for (const auto& e : exits) EXPECT_TRUE(e.ok()) << testing::describe(e);
}

// Rank 1 stays out of allreduce #0 until rank 0 has logged the stall; the warning must give
// the timeout set after setup (123 s), not the one the communicator was made with (60 s).
TEST(Stall, WarningNamesTheTimeoutSetAfterSetup) {
  tandem::testing::TempDir dir;
  const std::string log = dir.file("rank0.log");
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        if (ctx.rank == 0) log_to(log);
        auto comm = connect(ctx);
        ASSERT_EQ(comm->timeout(), 60s);
        comm->set_timeout(123s);
        if (ctx.rank == 1) wait_for_stall_warning(log);
        std::vector<float> v(16, 1.0f);
        comm->allreduce(BufferView::of(std::span<float>(v)), ReduceOp::sum);
        EXPECT_EQ(v[0], 2.0f);
        if (ctx.rank != 0) return;
        const std::string text = read_file(log);
        EXPECT_NE(text.find("It fails at TANDEM_TIMEOUT (123 s after it started)"),
                  std::string::npos)
            << text;
      },
      run_options("shm", {"TANDEM_TIMEOUT=60", "TANDEM_STALL_WARN=0.3"}));
  testing::expect_all_ok(exits);
}

// A rank that has called no collective yet has published no progress record (setup spends no
// store request on one): a stall report reads its address record instead and says so. Rank 2
// joins allreduce #0 once rank 0 has logged the report.
TEST(Stall, ARankWithNoCollectiveYetIsNamedFromItsAddressRecord) {
  tandem::testing::TempDir dir;
  const std::string log = dir.file("rank0.log");
  const auto exits = testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        if (ctx.rank == 0) log_to(log);
        auto comm = connect(ctx);
        const std::string mine[] = {fmt::format("tandem/r0/world/progress/{}", ctx.rank)};
        EXPECT_FALSE(ctx.store()->check(mine)) << mine[0] << " was published at setup";
        if (ctx.rank == 2) wait_for_stall_warning(log);
        std::vector<float> v(64, 1.0f);
        comm->allreduce(BufferView::of(std::span<float>(v)), ReduceOp::sum);
        EXPECT_EQ(v[0], 3.0f);
        if (ctx.rank != 0) return;
        const std::string text = read_file(log);
        EXPECT_TRUE(contains(text, "ranks 0,1 waiting in it since")) << text;
        EXPECT_TRUE(contains(text, "rank 2 never entered it (completed no collective)")) << text;
        EXPECT_FALSE(contains(text, "reported no progress")) << text;
      },
      run_options("shm", {"TANDEM_STALL_WARN=0.3"}));
  for (const auto& e : exits) EXPECT_TRUE(e.ok()) << testing::describe(e);
}

}  // namespace
}  // namespace tandem::mptest
