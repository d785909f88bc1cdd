// The executor's hand-over between the calling thread and the worker: a blocking call runs
// inline when nothing is queued and queues behind asynchronous work otherwise, and either
// way every rank runs the same operations in the same order.

#include "mp_util.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <thread>
#include <vector>

namespace tandem::mptest {
namespace {

using namespace std::chrono_literals;

// Rank r contributes r + 1 + (i + salt) % 7 at element i: sums are exact in f32.
std::vector<float> contribution(int rank, std::size_t n, std::size_t salt) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(rank + 1 + (i + salt) % 7);
  return v;
}

std::size_t wrong_sums(const std::vector<float>& v, int world, std::size_t salt) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    float s = 0;
    for (int r = 0; r < world; ++r) s += static_cast<float>(r + 1 + (i + salt) % 7);
    wrong += v[i] != s;
  }
  return wrong;
}

class Executor : public ::testing::TestWithParam<std::string> {};

TEST_P(Executor, InlineAndQueuedCallsInterleaveInCallOrder) {
  const auto exits = testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        struct Pending {
          std::vector<float> data;
          std::shared_ptr<Work> work;
          std::size_t salt;
        };
        std::deque<Pending> pending;
        std::size_t wrong = 0;
        // Asynchronous calls of varying size (some still running when the next call comes,
        // some long done), blocking calls of every collective size class in between, and
        // the asynchronous ones waited for late and out of order.
        for (std::size_t i = 0; i < 600; ++i) {
          const std::size_t n = i % 5 == 0 ? 20000 + i : 1 + i % 33;
          if (i % 3 == 0) {
            Pending p{contribution(ctx.rank, n, i), nullptr, i};
            auto v = BufferView::of(std::span<float>(p.data));
            p.work = comm->allreduce_async(v, v, ReduceOp::sum);
            pending.push_back(std::move(p));
          } else if (i % 7 == 0) {
            comm->barrier();
          } else {
            std::vector<float> data = contribution(ctx.rank, n, i);
            comm->allreduce(BufferView::of(std::span<float>(data)), ReduceOp::sum);
            wrong += wrong_sums(data, ctx.size, i);
          }
          if (pending.size() > 4) {
            Pending& p = i % 2 == 0 ? pending.front() : pending.back();
            p.work->wait(deadline_in(60s));
            wrong += wrong_sums(p.data, ctx.size, p.salt);
            i % 2 == 0 ? pending.pop_front() : pending.pop_back();
          }
        }
        for (Pending& p : pending) {
          p.work->wait(deadline_in(60s));
          wrong += wrong_sums(p.data, ctx.size, p.salt);
        }
        EXPECT_EQ(wrong, 0u);
        EXPECT_FALSE(comm->poisoned());
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

// The mesh's ownership is biased to the thread that created the communicator (no locked
// instruction on its calls) until another thread, or an asynchronous call, needs it. Here a
// second thread calls while the creator's calls run, on every rank, with identical calls
// (so that either thread's call may take either sequence number): the bias is revoked
// under contention, every result is right and nothing is left waiting. Then the threads
// take turns, and an asynchronous call follows.
TEST_P(Executor, ASecondThreadTakesTheMeshFromTheCreatingThread) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        constexpr std::size_t kSalt = 5;
        const auto calls = [&](int count, std::size_t n) {
          std::size_t wrong = 0;
          for (int i = 0; i < count; ++i) {
            std::vector<float> data = contribution(ctx.rank, n, kSalt);
            comm->allreduce(BufferView::of(std::span<float>(data)), ReduceOp::sum);
            wrong += wrong_sums(data, ctx.size, kSalt);
          }
          return wrong;
        };
        std::size_t wrong = calls(50, 2);  // the creator alone: biased
        std::size_t other_wrong = 0;
        std::thread other([&] { other_wrong = calls(400, 2); });
        wrong += calls(400, 2);
        other.join();
        EXPECT_EQ(wrong, 0u);
        EXPECT_EQ(other_wrong, 0u);
        std::thread([&] { other_wrong = calls(20, 1000); }).join();
        EXPECT_EQ(other_wrong, 0u);
        EXPECT_EQ(calls(20, 3), 0u);
        std::vector<float> data = contribution(ctx.rank, 64, 9);
        auto v = BufferView::of(std::span<float>(data));
        comm->allreduce_async(v, v, ReduceOp::sum)->wait(deadline_in(60s));
        EXPECT_EQ(wrong_sums(data, ctx.size, 9), 0u);
        EXPECT_FALSE(comm->poisoned());
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

TEST_P(Executor, BlockingCallQueuedBehindRunningWorkKeepsItsDeadline) {
  // Rank 1 does not join rank 0's asynchronous allreduce: rank 0's blocking call queued behind
  // it cannot start before its own deadline, fails with Timeout and poisons the communicator,
  // which fails the asynchronous one too. Rank 1 leaves once rank 0 has checked all that.
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        auto store = ctx.store();
        if (ctx.rank == 1) {
          store->get("checked", deadline_in(60s));
          return;
        }
        std::vector<float> a(1000, 1.0f), b(8, 1.0f);
        auto av = BufferView::of(std::span<float>(a));
        auto work = comm->allreduce_async(av, av, ReduceOp::sum);
        CallOptions o;
        o.deadline = deadline_in(300ms);
        try {
          comm->allreduce(BufferView::of(std::span<float>(b)), ReduceOp::sum, o);
          ADD_FAILURE() << "the blocking allreduce queued behind a stuck one succeeded";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::Timeout) << e.what();
        }
        EXPECT_TRUE(comm->poisoned());
        EXPECT_THROW(work->wait(deadline_in(60s)), Error);
        store->set("checked", "1");
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

INSTANTIATE_TEST_SUITE_P(RealTransports, Executor, ::testing::Values("shm", "tcp"), transport_name);

}  // namespace
}  // namespace tandem::mptest
