// Communicator::shrink: the remaining ranks make a communicator without the excluded ones,
// renumbered in order, with no call on the excluded ranks, which may be dead: a healthy
// communicator shrunk by a list, the survivors of a rank killed inside a collective, two
// ranks lost together, a shrink of a shrunk communicator, the arguments it refuses,
// shrink_lost(), where the survivors agree on the lost ranks through the store, and a second
// death at each step of a shrink's setup.
#include "mp_util.hpp"
#include "transport/bootstrap.hpp"

#include <tandem/error.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <vector>

namespace tandem::mptest {
namespace {

// Allreduce (sum) of one f64 value on `comm`; the result.
double sum_of(Communicator& comm, double mine) {
  double v = mine;
  comm.allreduce(BufferView::raw(&v, 1, DataType::f64), ReduceOp::sum);
  return v;
}

// The ranks `victims` of comm's 4 die together between two allreduces: only the others
// return, their second allreduce having failed with PeerLost. The victims die only once every
// other rank has finished the first allreduce: a rank that has finished a collective may still
// owe its peers their part of it, and dying then fails the collective on them.
void lose_ranks(Communicator& comm, store::Store& store, std::initializer_list<int> victims) {
  EXPECT_EQ(sum_of(comm, 1.0), 4.0);
  const auto is_victim = [&](int r) {
    return std::find(victims.begin(), victims.end(), r) != victims.end();
  };
  if (is_victim(comm.rank())) {
    std::vector<std::string> finished;
    for (int r = 0; r < comm.size(); ++r)
      if (!is_victim(r)) finished.push_back(fmt::format("finished/{}", r));
    store.wait(finished);
    std::raise(SIGKILL);
  }
  store.set(fmt::format("finished/{}", comm.rank()), "1");
  try {
    sum_of(comm, 1.0);
    ADD_FAILURE() << "the allreduce succeeded without the killed ranks";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::PeerLost) << e.what();
  }
}

// What ranks 0 and 3 of 4 have after shrinking without ranks 1 and 2: a communicator of 2 in
// which they are 0 and 1, and whose allreduce works.
void expect_ranks_0_and_3(Communicator& small, int old_rank) {
  EXPECT_EQ(small.size(), 2);
  EXPECT_EQ(small.rank(), old_rank == 0 ? 0 : 1);
  EXPECT_EQ(sum_of(small, old_rank), 3.0);
}

void expect_survivors_ok(const std::vector<testing::RankExit>& exits,
                         std::initializer_list<int> survivors) {
  for (const int r : survivors) {
    ASSERT_LT(static_cast<std::size_t>(r), exits.size());
    EXPECT_TRUE(exits[static_cast<std::size_t>(r)].ok()) << testing::describe(exits[r]);
  }
}

class Shrink : public ::testing::TestWithParam<std::string> {};

// Ranks 0, 2 and 3 of 4 drop rank 1, which makes no call and exits.
TEST_P(Shrink, AHealthyCommunicatorByAList) {
  const auto exits = testing::run_ranks(
      4,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        EXPECT_EQ(sum_of(*comm, 1.0), 4.0);
        if (ctx.rank == 1) return;
        const int exclude[] = {1};
        auto small = comm->shrink(exclude);
        ASSERT_NE(small, nullptr);
        EXPECT_EQ(small->size(), 3);
        EXPECT_EQ(small->rank(), ctx.rank == 0 ? 0 : ctx.rank - 1);
        // The old ranks' sum (0 + 2 + 3) and the new ranks' (0 + 1 + 2).
        EXPECT_EQ(sum_of(*small, ctx.rank), 5.0);
        EXPECT_EQ(sum_of(*small, small->rank()), 3.0);
        std::vector<double> all(3, -1.0);
        const double mine = ctx.rank;
        small->allgather(BufferView::raw(const_cast<double*>(&mine), 1, DataType::f64),
                         BufferView::raw(all.data(), all.size(), DataType::f64));
        EXPECT_EQ(all, (std::vector<double>{0.0, 2.0, 3.0}));
        EXPECT_FALSE(comm->poisoned());
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

// Rank 1 of 3 is SIGKILLed inside an allreduce: the survivors fail with PeerLost, shrink
// without it and go on.
TEST_P(Shrink, TheSurvivorsOfAKilledRank) {
  const auto exits = testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        std::vector<float> v(1024, 1.0f);
        allreduce_while_rank_dies(*comm, *ctx.store(), BufferView::of(std::span<float>(v)), 1,
                                  "shrink");
        EXPECT_TRUE(comm->poisoned());
        const auto start = Clock::now();
        const int exclude[] = {1};
        auto small = comm->shrink(exclude);
        EXPECT_EQ(small->size(), 2);
        EXPECT_EQ(small->rank(), ctx.rank == 0 ? 0 : 1);
        std::fill(v.begin(), v.end(), 1.0f);
        small->allreduce(BufferView::of(std::span<float>(v)), ReduceOp::sum);
        EXPECT_EQ(v[0], 2.0f);
        EXPECT_EQ(v[1023], 2.0f);
        std::printf("rank %d: shrunk and all-reduced in %.1f ms\n", ctx.rank,
                    std::chrono::duration<double, std::milli>(Clock::now() - start).count());
      },
      run_options(GetParam()));
  ASSERT_EQ(exits.size(), 3u);
  EXPECT_TRUE(exits[0].ok()) << testing::describe(exits[0]);
  EXPECT_TRUE(exits[2].ok()) << testing::describe(exits[2]);
}

// Ranks 1 and 2 of 4 die together between two collectives; ranks 0 and 3 shrink without both.
TEST_P(Shrink, TwoRanksLostTogether) {
  const auto exits = testing::run_ranks(
      4,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        lose_ranks(*comm, *ctx.store(), {1, 2});
        const int exclude[] = {2, 1};  // in any order
        auto small = comm->shrink(exclude);
        expect_ranks_0_and_3(*small, ctx.rank);
      },
      run_options(GetParam()));
  expect_survivors_ok(exits, {0, 3});
}

// A shrunk communicator shrinks again, and the parent shrinks a second time under a name of
// its own (the n-th shrink of every rank meets the n-th of the others).
TEST_P(Shrink, AgainAndTwiceFromOneParent) {
  const auto exits = testing::run_ranks(
      4,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        if (ctx.rank == 3) return;
        const int without3[] = {3};
        auto a = comm->shrink(without3);  // old 0,1,2 -> 0,1,2
        EXPECT_EQ(sum_of(*a, ctx.rank), 3.0);
        auto b = comm->shrink(without3);  // the second shrink of the parent: a new group
        EXPECT_EQ(b->size(), 3);
        EXPECT_EQ(sum_of(*b, 10.0), 30.0);
        if (a->rank() == 0) return;
        const int without0[] = {0};
        auto c = a->shrink(without0);  // old 1,2 -> 0,1
        EXPECT_EQ(c->size(), 2);
        EXPECT_EQ(c->rank(), ctx.rank - 1);
        EXPECT_EQ(sum_of(*c, ctx.rank), 3.0);
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

// shrink_lost(): ranks 1 and 2 of 4 die together; each survivor may have heard of only one of
// them, yet both leave out both (the union of their views, decided once).
TEST_P(Shrink, LostRanksAreAgreedWithoutAList) {
  const auto exits = testing::run_ranks(
      4,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        lose_ranks(*comm, *ctx.store(), {1, 2});
        const std::vector<int> seen = comm->lost_ranks();
        EXPECT_FALSE(seen.empty());
        for (const int r : seen) EXPECT_TRUE(r == 1 || r == 2) << r;
        auto small = comm->shrink_lost(std::chrono::seconds(30));
        expect_ranks_0_and_3(*small, ctx.rank);
      },
      run_options(GetParam()));
  expect_survivors_ok(exits, {0, 3});
}

// A communicator split from the world, unused since rank 2 died (not poisoned, its error names
// nobody), shrinks by itself too: shrink_lost() learns of the death from its own connections
// (its shrink of the world made a successor already: this is a second shrink).
TEST_P(Shrink, ASplitCommunicatorUnusedSinceTheDeathShrinksToo) {
  const auto exits = testing::run_ranks(
      4,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        auto reversed = comm->split(0, -ctx.rank);  // ranks 3,2,1,0 become 0,1,2,3
        ASSERT_NE(reversed, nullptr);
        EXPECT_EQ(sum_of(*reversed, 1.0), 4.0);
        lose_ranks(*comm, *ctx.store(), {2});
        auto world = comm->shrink_lost();
        EXPECT_EQ(world->size(), 3);
        EXPECT_FALSE(reversed->poisoned());
        std::vector<int> lost;
        auto small = reversed->shrink_lost(std::nullopt, &lost);
        EXPECT_EQ(lost, (std::vector<int>{1})) << "old rank 2 is rank 1 of the reversed one";
        ASSERT_EQ(small->size(), 3);
        // Old ranks 3, 1, 0 in that order.
        EXPECT_EQ(small->rank(), ctx.rank == 3 ? 0 : ctx.rank == 1 ? 1 : 2);
        EXPECT_EQ(sum_of(*small, ctx.rank), 4.0);
      },
      run_options(GetParam()));
  expect_survivors_ok(exits, {0, 1, 3});
}

// The communicators split from the world follow its shrinks. 4 ranks split by parity ({0,2},
// {1,3}) and in reverse ({3,2,1,0}); rank 1 dies. The survivors' shrink of the world shrinks
// the odd child (rank 3 alone) and the reversed one (old 3, 2, 0), and passes the even child on
// unchanged. Then rank 2 leaves: the shrink of the shrunk world shrinks the children it was
// passed (the even one, and the reversed one a second time).
TEST_P(Shrink, SplitCommunicatorsFollowTheirParent) {
  const auto exits = testing::run_ranks(
      4,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        auto parity = comm->split(ctx.rank % 2, ctx.rank);
        auto reversed = comm->split(0, -ctx.rank);
        ASSERT_TRUE(parity && reversed);
        EXPECT_EQ(sum_of(*parity, 1.0), 2.0);
        lose_ranks(*comm, *ctx.store(), {1});
        const int without1[] = {1};
        auto world = comm->shrink(without1);
        ASSERT_EQ(world->size(), 3);
        if (ctx.rank == 3) {
          auto odd = parity->successor();
          ASSERT_NE(odd, nullptr);
          EXPECT_EQ(odd->size(), 1);
          EXPECT_EQ(sum_of(*odd, 3.0), 3.0);
        } else {
          EXPECT_EQ(parity->successor(), nullptr) << "the even child lost nobody";
          EXPECT_EQ(sum_of(*parity, ctx.rank), 2.0);
        }
        auto rev = reversed->successor();
        ASSERT_NE(rev, nullptr);
        ASSERT_EQ(rev->size(), 3);
        EXPECT_EQ(rev->rank(), ctx.rank == 3 ? 0 : ctx.rank == 2 ? 1 : 2);
        EXPECT_EQ(sum_of(*rev, ctx.rank), 5.0);
        if (ctx.rank == 2) return;   // leaves: the others shrink without it, it makes no call
        const int without2[] = {1};  // old rank 2 is rank 1 of `world`
        auto world2 = world->shrink(without2);
        EXPECT_EQ(world2->size(), 2);
        if (ctx.rank == 0) {
          auto even = parity->successor();
          ASSERT_NE(even, nullptr);
          EXPECT_EQ(even->size(), 1);
        } else {
          EXPECT_EQ(parity->successor()->successor(), nullptr) << "rank 3's odd child is alone";
        }
        auto rev2 = rev->successor();
        ASSERT_NE(rev2, nullptr);
        EXPECT_EQ(rev2->size(), 2);
        EXPECT_EQ(rev2->rank(), ctx.rank == 3 ? 0 : 1);
        EXPECT_EQ(sum_of(*rev2, ctx.rank), 3.0);
      },
      run_options(GetParam()));
  expect_survivors_ok(exits, {0, 2, 3});
}

INSTANTIATE_TEST_SUITE_P(Transports, Shrink, ::testing::Values("shm", "tcp"), transport_name);
#if TANDEM_HAVE_UCX
// UCX between ranks of one host: its shared memory ("ucx") and its tcp transport ("ucx_tcp").
INSTANTIATE_TEST_SUITE_P(Ucx, Shrink, ::testing::Values("ucx", "ucx_tcp"), transport_name);
#endif

// The setup step at which rank 2 dies inside the shrunk communicator's setup.
std::string g_die_at;
void die_at_step(std::string_view step) {
  if (step == g_die_at) std::raise(SIGKILL);
}

struct StepCase {
  std::string transport;
  std::string step;
};
class ShrinkKilledDuringSetup : public ::testing::TestWithParam<StepCase> {};

// A second death during the shrink, at each step of the shrunk communicator's setup: rank 1 of
// 4 dies, then rank 2 inside the shrink. Ranks 0 and 3 both get PeerLost from shrink_lost()
// (never a communicator that needs rank 2), and a shrink of the parent without both goes on.
// (The parent never saw rank 2 die: a second shrink_lost() would leave it out only at its
// deadline, which ShrinkLost.ARankThatDoesNotAnswerByTheDeadline... covers.)
TEST_P(ShrinkKilledDuringSetup, IsPeerLostAndTheNextShrinkLeavesItOut) {
  const auto& p = GetParam();
  const auto exits = testing::run_ranks(
      4,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        lose_ranks(*comm, *ctx.store(), {1});
        if (ctx.rank == 2) {
          g_die_at = p.step;
          transport::testing::setup_step_hook = die_at_step;
        }
        try {
          comm->shrink_lost(std::chrono::seconds(30));
          ADD_FAILURE() << "a shrink succeeded although rank 2 died inside it";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::PeerLost) << e.what();
        }
        const int without[] = {1, 2};
        expect_ranks_0_and_3(*comm->shrink(without), ctx.rank);
      },
      run_options(p.transport));
  expect_survivors_ok(exits, {0, 3});
}

std::vector<StepCase> step_cases() {
  std::vector<StepCase> cases;
  for (const char* t : {"shm", "tcp"})
    for (const char* s : {"start", "published addresses", "gathered addresses",
                          "connected setup peers", "exchanged records", "connected"})
      cases.push_back({t, s});
  cases.push_back({"shm", "published shared-memory segment names"});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Steps, ShrinkKilledDuringSetup, ::testing::ValuesIn(step_cases()),
                         [](const auto& test) {
                           std::string name = test.param.transport + "_" + test.param.step;
                           for (char& c : name)
                             if (c == ' ' || c == '-') c = '_';
                           return name;
                         });

// shrink_lost() on a healthy communicator: rank 2 is alive but does not answer before the
// others' 300 ms are up, so they leave it out; when it calls afterwards it is told so.
TEST(ShrinkLost, ARankThatDoesNotAnswerByTheDeadlineIsLeftOutAndToldSo) {
  const auto exits = testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        EXPECT_TRUE(comm->lost_ranks().empty());
        if (ctx.rank == 2) {
          const std::string done[] = {"shrunk/0", "shrunk/1"};
          ctx.store()->wait(done);
          try {
            comm->shrink_lost(std::chrono::milliseconds(300));
            ADD_FAILURE() << "rank 2 was let in after the others had decided";
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::PeerLost) << e.what();
            EXPECT_NE(e.message().find("left this rank (rank 2) out"), std::string::npos)
                << e.what();
          }
          return;
        }
        auto small = comm->shrink_lost(std::chrono::milliseconds(300));
        EXPECT_EQ(small->size(), 2);
        EXPECT_EQ(sum_of(*small, 1.0), 2.0);
        ctx.store()->set(fmt::format("shrunk/{}", ctx.rank), "1");
      },
      run_options("tcp"));
  testing::expect_all_ok(exits);
}

TEST(ShrinkArguments, AreChecked) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        const auto refused = [&](std::vector<int> exclude, std::string_view says) {
          try {
            comm->shrink(exclude);
            ADD_FAILURE() << "shrink accepted " << says;
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
            EXPECT_NE(e.message().find(says), std::string::npos) << e.what();
          }
        };
        const int other = 1 - ctx.rank;
        refused({2}, "rank 2 is not a rank of this communicator of 2 ranks");
        refused({-1}, "rank -1 is not a rank");
        refused({other, other}, fmt::format("rank {} is excluded twice", other));
        refused({ctx.rank}, fmt::format("rank {} excludes itself", ctx.rank));
        EXPECT_EQ(sum_of(*comm, 1.0), 2.0);  // still usable: nothing ran on it
      },
      run_options("tcp"));
  testing::expect_all_ok(exits);
}

}  // namespace
}  // namespace tandem::mptest
