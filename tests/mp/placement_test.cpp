// Two ranks of one host that the scheduler left on one CPU, with every CPU allowed, take
// turns on it (each small collective a context switch); a waiting rank that finds its peer on
// its own CPU moves to a CPU of its own (transport/cpu_spread.hpp). Placed on one CPU here
// as the scheduler sometimes places them: each pins itself there and then allows every CPU
// again. Measured on this 2-CPU VM, 10 runs each: apart after the first 100 allreduces every
// time; without the move, the kernel's balancer separated them after 3,100 to 35,400. Over
// TCP (four runs each): 100-2,800 with the move, 2,200-6,700 without. Ranks bound to one
// CPU and then allowed every CPU: apart within 200 allreduces in 8 of 8 runs (shm and tcp;
// and 20 of 20 beside another test's ranks); under the old rule, where a look that moved
// nothing started the 20 ms pause too, together after them in 7 of 8.

#include "mp_util.hpp"
#include "support/affinity.hpp"
#include "transport/cpu_spread.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <sched.h>
#include <span>

namespace tandem::mptest {
namespace {

// Over shared memory the peers see each other's CPU; over TCP (TANDEM_SHM_DISABLE=1 on one
// host) they cannot, and a waiting rank whose yield gave its CPU away moves at once.
class Placement : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (affinity_.cpus().size() < 2) GTEST_SKIP() << "needs 2 CPUs (this process may use 1)";
  }

  void pin_to_first() const { ASSERT_TRUE(affinity_.pin(affinity_.cpus()[0])); }
  void allow_all() const { ASSERT_TRUE(affinity_.allow_all()); }

  testing::CpuAffinity affinity_;  ///< pins to its first CPU, allows all of them again
};

// n allreduces of one float, each result checked.
void allreduces(Communicator& comm, int rank, int n) {
  for (int i = 0; i < n; ++i) {
    auto x = static_cast<float>(rank + i);
    comm.allreduce(BufferView::of(std::span<float>(&x, 1)));
    ASSERT_EQ(x, static_cast<float>(1 + 2 * i));
  }
}

// The CPU each of the two ranks runs on now.
std::array<int, 2> cpus_now(Communicator& comm) {
  const int cpu = ::sched_getcpu();
  std::array<int, 2> cpus{};
  comm.allgather(BufferView::of(std::span<const int>(&cpu, 1)),
                 BufferView::of(std::span<int>(cpus)));
  return cpus;
}

// Moves made by both ranks since `since` (this rank's count then).
int moves_of_both(Communicator& comm, int since) {
  int moves = transport::CpuSpread::moves() - since;
  comm.allreduce(BufferView::of(std::span<int>(&moves, 1)));
  return moves;
}

TEST_P(Placement, RanksLeftOnOneCpuMoveApart) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        pin_to_first();
        comm->barrier();  // both on the first CPU now
        allow_all();
        std::array<int, 2> cpus{};
        int rounds = 0;
        // Up to 20,000: on a loaded host (CI, ctest -j2 running another test beside) 2,000 once
        // ended with both still reported on one CPU at every look and no move.
        for (; rounds < 200 && cpus[0] == cpus[1]; ++rounds) {
          allreduces(*comm, ctx.rank, 100);
          cpus = cpus_now(*comm);
        }
        // Moved apart: seen apart, or (on a busy host, where the scheduler may put them
        // together again) one of them moved.
        const int moves = moves_of_both(*comm, 0);
        EXPECT_TRUE(cpus[0] != cpus[1] || moves > 0)
            << "rank " << ctx.rank << ": both ranks still on CPU " << cpus[0] << " after "
            << rounds * 100 << " allreduces, and neither moved";
        std::printf("rank %d: on CPUs %d and %d after %d allreduces, %d move(s)\n", ctx.rank,
                    cpus[0], cpus[1], rounds * 100, moves);
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

// Ranks bound to one CPU take turns from the start, and every look of the spread finds
// nowhere to move. Once every CPU is allowed again, the next look moves one of them: a look
// that moved nothing used to start the 20 ms pause between moves as well, which kept such a
// pair together for 20 ms (about 8,000 allreduces of theirs) after the binding ended.
TEST_P(Placement, RanksBoundToOneCpuMoveApartOnceAllowed) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        pin_to_first();
        // Bound, they take turns, and each look finds nowhere to go. A move made before the
        // binding (while connecting) started a pause of kRetry: take turns for longer than
        // that, so that only what the looks made of the pause is left.
        const int before = transport::CpuSpread::moves();
        const auto bound_at = Clock::now();
        for (int going = 1; going != 0;) {
          allreduces(*comm, ctx.rank, 100);
          going = Clock::now() - bound_at < 2 * transport::CpuSpread::kRetry ? 1 : 0;
          comm->allreduce(BufferView::of(std::span<int>(&going, 1)), ReduceOp::max);
        }
        const int bound_moves = moves_of_both(*comm, before);
        const int allowed_at = transport::CpuSpread::moves();
        allow_all();
        comm->barrier();  // both allowed everywhere, both still on the first CPU
        allreduces(*comm, ctx.rank, 200);
        const auto cpus = cpus_now(*comm);
        const int moves = moves_of_both(*comm, allowed_at);
        EXPECT_EQ(bound_moves, 0) << "a rank moved while bound to one CPU";
        EXPECT_TRUE(cpus[0] != cpus[1] || moves > 0)
            << "rank " << ctx.rank << ": both ranks still on CPU " << cpus[0]
            << " 200 allreduces after every CPU was allowed, and neither moved";
        std::printf("rank %d: on CPUs %d and %d, %d move(s) after the binding ended\n", ctx.rank,
                    cpus[0], cpus[1], moves);
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

INSTANTIATE_TEST_SUITE_P(Transports, Placement, ::testing::Values("shm", "tcp"), transport_name);

}  // namespace
}  // namespace tandem::mptest
