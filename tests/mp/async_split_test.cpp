// Asynchronous operations (ordering, Work), and split().

#include "mp_util.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

namespace tandem::mptest {
namespace {

using namespace std::chrono_literals;

// Rank r contributes r + 1 + i % 5 at element i: the sum over ranks is exact in f32.
std::vector<float> contribution(int rank, std::size_t n, int salt) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(rank + 1 + (i + salt) % 5);
  return v;
}

float sum_over_ranks(int world, std::size_t i, int salt) {
  float s = 0;
  for (int r = 0; r < world; ++r) s += static_cast<float>(r + 1 + (i + salt) % 5);
  return s;
}

void expect_sums(const std::vector<float>& v, int world, int salt, const std::string& what) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < v.size(); ++i) wrong += v[i] != sum_over_ranks(world, i, salt);
  EXPECT_EQ(wrong, 0u) << what;
}

class Async : public ::testing::TestWithParam<std::string> {};

TEST_P(Async, InFlightWaitedInReverseThenBlockingRunsAfter) {
  const auto exits = testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        const std::vector<std::size_t> sizes{1, 1000, 1u << 20, 7, (1u << 18) + 1, 0};
        std::vector<std::vector<float>> bufs;
        std::vector<std::shared_ptr<Work>> works;
        for (std::size_t k = 0; k < sizes.size(); ++k) {
          bufs.push_back(contribution(ctx.rank, sizes[k], static_cast<int>(k)));
          auto v = BufferView::of(std::span<float>(bufs.back()));
          works.push_back(comm->allreduce_async(v, v, ReduceOp::sum));
        }
        // A blocking call queues behind the asynchronous ones and returns after all of them.
        std::vector<float> last = contribution(ctx.rank, 4096, 99);
        comm->allreduce(BufferView::of(std::span<float>(last)), ReduceOp::sum);
        expect_sums(last, ctx.size, 99, "blocking allreduce after async ones");
        for (std::size_t k = 0; k < works.size(); ++k) {
          EXPECT_TRUE(works[k]->test())
              << "async #" << k << " not complete after a later blocking call";
        }
        for (std::size_t k = works.size(); k-- > 0;) {
          works[k]->wait();
          EXPECT_TRUE(works[k]->is_completed());
          EXPECT_EQ(works[k]->error(), nullptr);
          expect_sums(bufs[k], ctx.size, static_cast<int>(k),
                      fmt::format("async allreduce #{}", k));
        }
        // Asynchronous calls of other kinds, in order, with a dependency between them: the
        // broadcast reads what the allreduce wrote.
        std::vector<float> a = contribution(ctx.rank, 513, 3);
        auto av = BufferView::of(std::span<float>(a));
        auto w1 = comm->allreduce_async(av, av, ReduceOp::sum);
        auto w2 = comm->broadcast_async(av, av, 1);
        auto w3 = comm->barrier_async();
        w3->wait(deadline_in(30s));
        EXPECT_TRUE(w1->test());
        EXPECT_TRUE(w2->test());
        expect_sums(a, ctx.size, 3, "allreduce then broadcast");
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

// CommOptions::lazy_start: the worker is not woken per operation. Operations nobody waits for
// still complete (the polling worker starts them), in order, with the right values; a waited
// one runs on the waiting thread.
TEST_P(Async, LazyStartCompletesOperationsNobodyWaitsFor) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        CommOptions options;
        options.lazy_start = std::chrono::microseconds(200);
        auto comm = connect(ctx, options);
        std::vector<std::vector<float>> bufs;
        std::vector<std::shared_ptr<Work>> works;
        for (int i = 0; i < 4; ++i) bufs.push_back(contribution(ctx.rank, 100 + i, i));
        for (auto& v : bufs) {
          auto view = BufferView::of(std::span<float>(v));
          works.push_back(comm->allreduce_async(view, view, ReduceOp::sum));
        }
        // Polled, never waited: only the worker can run them.
        const auto deadline = deadline_in(std::chrono::seconds(60));
        while (!works.back()->test() && Clock::now() < deadline) std::this_thread::yield();
        for (auto& w : works) EXPECT_TRUE(w->test());
        for (int i = 0; i < 4; ++i) expect_sums(bufs[i], 2, i, "lazily started allreduce");
        std::vector<float> v = contribution(ctx.rank, 33, 9);
        auto view = BufferView::of(std::span<float>(v));
        comm->allreduce_async(view, view, ReduceOp::sum)->wait();
        expect_sums(v, 2, 9, "waited allreduce");
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

// Work::start(): with a lazy-start period longer than the test's deadline, only start() can
// get an operation nobody waits for going (torch's futures: DDP's buckets).
TEST_P(Async, LazyStartWorkStartRunsItWithoutAPoll) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        CommOptions options;
        options.lazy_start = std::chrono::minutes(5);
        auto comm = connect(ctx, options);
        std::vector<float> v = contribution(ctx.rank, 100, 3);
        auto view = BufferView::of(std::span<float>(v));
        auto work = comm->allreduce_async(view, view, ReduceOp::sum);
        work->start();
        const auto deadline = deadline_in(std::chrono::seconds(60));
        while (!work->test() && Clock::now() < deadline) std::this_thread::yield();
        ASSERT_TRUE(work->test()) << "start() did not start the operation";
        expect_sums(v, 2, 3, "started allreduce");
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

// Lazy start with a period longer than the test: an operation waited for behind one that
// nobody waited for still completes (the waiter, or the second submit, wakes the worker),
// and both in order with the right values.
TEST_P(Async, LazyStartWaitBehindAnUnstartedOperationCompletes) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        CommOptions options;
        options.lazy_start = std::chrono::minutes(5);
        auto comm = connect(ctx, options);
        std::vector<float> a = contribution(ctx.rank, 100, 4);
        std::vector<float> b = contribution(ctx.rank, 100, 5);
        auto va = BufferView::of(std::span<float>(a));
        auto vb = BufferView::of(std::span<float>(b));
        auto first = comm->allreduce_async(va, va, ReduceOp::sum);
        auto second = comm->allreduce_async(vb, vb, ReduceOp::sum);
        second->wait(deadline_in(std::chrono::seconds(60)));
        EXPECT_TRUE(first->test());
        expect_sums(a, 2, 4, "the operation nobody waited for");
        expect_sums(b, 2, 5, "the one waited for behind it");
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

// Under lazy start, sends and receives (which no waiting caller runs: only the worker
// progresses them) interleaved with waited collectives all complete with the right values.
TEST_P(Async, LazyStartRunsSendsAndReceivesBetweenWaitedCollectives) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        CommOptions options;
        options.lazy_start = std::chrono::microseconds(200);
        auto comm = connect(ctx, options);
        const int peer = 1 - ctx.rank;
        for (int i = 0; i < 20; ++i) {
          std::vector<float> out = contribution(ctx.rank, 64, i);
          std::vector<float> in(out.size(), -1.f);
          auto recv = comm->recv_async(BufferView::of(std::span<float>(in)), peer, 7);
          auto send = comm->send_async(BufferView::of(std::span<float>(out)), peer, 7);
          send->wait();
          recv->wait();
          EXPECT_EQ(in, contribution(peer, 64, i)) << "message " << i;
          std::vector<float> v = contribution(ctx.rank, 100, i);
          auto view = BufferView::of(std::span<float>(v));
          comm->allreduce_async(view, view, ReduceOp::sum)->wait();
          expect_sums(v, 2, i, "allreduce between messages");
        }
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

TEST_P(Async, WorkWaitTimesOutWhileThePeerIsLateThenCompletes) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        auto store = ctx.store();
        std::vector<float> v = contribution(ctx.rank, 100, 0);
        auto view = BufferView::of(std::span<float>(v));
        if (ctx.rank == 0) {
          auto w = comm->allreduce_async(view, view, ReduceOp::sum);
          try {
            w->wait(deadline_in(200ms));
            ADD_FAILURE() << "wait returned although rank 1 has not called allreduce";
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::Timeout) << e.what();
            EXPECT_NE(e.message().find("allreduce #"), std::string::npos) << e.what();
          }
          EXPECT_FALSE(w->test());
          EXPECT_EQ(w->error(), nullptr);
          store->set("go", "1");
          w->wait();
          EXPECT_FALSE(comm->poisoned());
        } else {
          store->get("go");
          comm->allreduce(view, ReduceOp::sum);
        }
        expect_sums(v, 2, 0, "allreduce");
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

TEST_P(Async, PointToPointRingOfLargeMessages) {
  const auto exits = testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        const std::size_t n = 3u << 20;  // 12 MiB: more than the shm ring and socket buffers
        const int next = (ctx.rank + 1) % ctx.size;
        const int prev = (ctx.rank + ctx.size - 1) % ctx.size;
        std::vector<float> out(n, static_cast<float>(ctx.rank)), in(n, -1.0f);
        auto r = comm->recv_async(BufferView::of(std::span<float>(in)), prev, 5);
        auto s = comm->send_async(BufferView::of(std::span<float>(out)), next, 5);
        r->wait();
        s->wait();
        EXPECT_EQ(std::count(in.begin(), in.end(), static_cast<float>(prev)), static_cast<long>(n));
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

TEST_P(Async, SplitByParityByHostAndNested) {
  const auto exits = testing::run_ranks(
      4,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        // Parity, with the key reversing the order inside each group.
        auto half = comm->split(ctx.rank % 2, -ctx.rank);
        ASSERT_NE(half, nullptr);
        EXPECT_EQ(half->size(), 2);
        EXPECT_EQ(half->rank(), ctx.rank < 2 ? 1 : 0);  // {0,2}: 2 first; {1,3}: 3 first
        std::vector<std::int64_t> v{ctx.rank, 1};
        half->allreduce(BufferView::of(std::span<std::int64_t>(v)), ReduceOp::sum);
        EXPECT_EQ(v[0], ctx.rank % 2 == 0 ? 0 + 2 : 1 + 3);
        EXPECT_EQ(v[1], 2);
        // A broadcast from the group's rank 0 (world rank 2 or 3).
        std::vector<std::int32_t> b{half->rank() == 0 ? ctx.rank * 10 : -1};
        half->broadcast(BufferView::of(std::span<std::int32_t>(b)), 0);
        EXPECT_EQ(b[0], ctx.rank % 2 == 0 ? 20 : 30);

        // By host: every rank of this machine in one group, ordered by world rank.
        auto host = comm->split(0, comm->local_rank());
        ASSERT_NE(host, nullptr);
        EXPECT_EQ(host->size(), comm->local_size());
        EXPECT_EQ(host->rank(), comm->local_rank());
        EXPECT_EQ(host->local_size(), host->size());
        std::vector<float> f(1000, 1.0f);
        host->allreduce(BufferView::of(std::span<float>(f)), ReduceOp::sum);
        EXPECT_EQ(f[999], static_cast<float>(host->size()));

        // color < 0: not a member (still a collective of the parent).
        auto some = comm->split(ctx.rank == 3 ? -1 : 7, 0);
        EXPECT_EQ(some == nullptr, ctx.rank == 3);
        if (some) {
          EXPECT_EQ(some->size(), 3);
          EXPECT_EQ(some->rank(), ctx.rank);
          some->barrier();
        }

        // Nested: split a split.
        auto single = half->split(half->rank(), 0);
        ASSERT_NE(single, nullptr);
        EXPECT_EQ(single->size(), 1);
        std::vector<float> one{3.0f};
        single->allreduce(BufferView::of(std::span<float>(one)), ReduceOp::sum);
        EXPECT_EQ(one[0], 3.0f);

        // The parent still works after its children did.
        std::vector<std::int32_t> all{1};
        comm->allreduce(BufferView::of(std::span<std::int32_t>(all)), ReduceOp::sum);
        EXPECT_EQ(all[0], 4);
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

TEST_P(Async, SeveralCommunicatorsOverOneStore) {
  const auto exits = testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        auto store = ctx.store();
        // Same store, same (default) prefix: the second group does not read the first's keys.
        auto a = Communicator::create(store, ctx.rank, ctx.size);
        auto b = Communicator::create(store, ctx.rank, ctx.size);
        for (int round = 0; round < 3; ++round) {
          std::vector<std::int32_t> x{ctx.rank}, y{10 * ctx.rank};
          auto wa = a->allreduce_async(BufferView::of(std::span<std::int32_t>(x)),
                                       BufferView::of(std::span<std::int32_t>(x)), ReduceOp::sum);
          b->allreduce(BufferView::of(std::span<std::int32_t>(y)), ReduceOp::max);
          wa->wait();
          EXPECT_EQ(x[0], 3);
          EXPECT_EQ(y[0], 20);
        }
        a.reset();
        auto c = Communicator::create(store, ctx.rank, ctx.size);  // a third, after one is gone
        std::vector<float> z{1.0f};
        c->allreduce(BufferView::of(std::span<float>(z)), ReduceOp::sum);
        EXPECT_EQ(z[0], 3.0f);
        b->barrier();
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

INSTANTIATE_TEST_SUITE_P(RealTransports, Async, ::testing::Values("shm", "tcp"), transport_name);

}  // namespace
}  // namespace tandem::mptest
