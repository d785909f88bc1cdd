// Communicator::grow and Communicator::join: a process joins a running group at a step
// boundary and gets the next rank; a replacement restores a group shrunk after a kill; a joiner
// that dies while it waits is skipped; one that nobody admits gives up with a clear error; split
// communicators admit nobody.
#include "mp_util.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>
#include <tandem/store.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

namespace tandem::mptest {
namespace {

constexpr const char* kGroup = "grow-test/world";

double sum_of(Communicator& comm, double mine) {
  double v = mine;
  comm.allreduce(BufferView::raw(&v, 1, DataType::f64), ReduceOp::sum);
  return v;
}

CommOptions group_options() {
  CommOptions o;
  o.store_prefix = kGroup;
  return o;
}

// Waits until the process with join ticket `t` asked to join kGroup (its who/ key is set).
void wait_for_request(store::Store& store, int t) {
  const std::string keys[] = {std::string(kGroup) + "/join/who/" + std::to_string(t)};
  store.wait(keys);
}

class Grow : public ::testing::TestWithParam<std::string> {};

// Ranks 0-2 form a group; their first grow() finds nobody and returns nullptr; process 3 then
// asks to join, and the next grow(), which waits for a joiner, admits it as rank 3 of 4 while
// the others keep their ranks.
TEST_P(Grow, AdmitsAWaitingProcessAsTheNextRank) {
  const auto exits = testing::run_ranks(
      4,
      [&](const testing::RankContext& ctx) {
        log::reload_from_env();
        auto store = ctx.store();
        std::shared_ptr<Communicator> comm;
        if (ctx.rank < 3) {
          auto group = Communicator::create(store, ctx.rank, 3, group_options());
          EXPECT_EQ(group->grow(), nullptr);
          EXPECT_EQ(sum_of(*group, 1.0), 3.0);
          EXPECT_FALSE(group->joined());
          store->set("first-grow/" + std::to_string(ctx.rank), "1");
          comm = group->grow(8, std::chrono::seconds(30));  // rank 0 waits for the joiner
          ASSERT_NE(comm, nullptr);
          EXPECT_EQ(comm->rank(), ctx.rank);
          EXPECT_FALSE(comm->joined());
          EXPECT_EQ(sum_of(*group, 1.0), 3.0) << "the old communicator stays as it was";
        } else {
          const std::string before[] = {"first-grow/0", "first-grow/1", "first-grow/2"};
          store->wait(before);
          comm = Communicator::join(store, group_options());
          EXPECT_EQ(comm->rank(), 3);
          EXPECT_TRUE(comm->joined());
        }
        EXPECT_EQ(comm->size(), 4);
        EXPECT_EQ(sum_of(*comm, comm->rank()), 6.0);
        std::vector<double> all(4, -1.0);
        double mine = ctx.rank;
        comm->allgather(BufferView::raw(&mine, 1, DataType::f64),
                        BufferView::raw(all.data(), all.size(), DataType::f64));
        EXPECT_EQ(all, (std::vector<double>{0.0, 1.0, 2.0, 3.0}));
        // Nobody else waits: the grown group's grow() admits nobody.
        EXPECT_EQ(comm->grow(), nullptr);
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

// Rank 2 of 4 is killed; the survivors shrink to 3 and then admit a replacement (process 4),
// which restores the group to 4 ranks: the replacement is rank 3.
TEST_P(Grow, AReplacementRestoresAGroupShrunkAfterAKill) {
  const auto exits = testing::run_ranks(
      5,
      [&](const testing::RankContext& ctx) {
        log::reload_from_env();
        auto store = ctx.store();
        if (ctx.rank == 4) {
          auto comm = Communicator::join(store, group_options());
          EXPECT_EQ(comm->size(), 4);
          EXPECT_EQ(comm->rank(), 3);
          EXPECT_EQ(sum_of(*comm, 1.0), 4.0);
          return;
        }
        auto world = Communicator::create(store, ctx.rank, 4, group_options());
        EXPECT_EQ(sum_of(*world, 1.0), 4.0);
        if (ctx.rank == 2) {
          const std::string finished[] = {"finished/0", "finished/1", "finished/3"};
          store->wait(finished);
          std::raise(SIGKILL);
        }
        store->set("finished/" + std::to_string(ctx.rank), "1");
        EXPECT_THROW(sum_of(*world, 1.0), Error);
        std::vector<int> lost;
        auto small = world->shrink_lost(std::nullopt, &lost);
        EXPECT_EQ(lost, (std::vector<int>{2}));
        ASSERT_EQ(small->size(), 3);
        wait_for_request(*store, 1);
        auto full = small->grow();
        ASSERT_NE(full, nullptr);
        EXPECT_EQ(full->size(), 4);
        EXPECT_EQ(full->rank(), small->rank());
        EXPECT_EQ(sum_of(*full, 1.0), 4.0);
      },
      run_options(GetParam()));
  ASSERT_EQ(exits.size(), 5u);
  for (const int r : {0, 1, 3, 4})
    EXPECT_TRUE(exits[static_cast<std::size_t>(r)].ok()) << testing::describe(exits[r]);
  EXPECT_EQ(exits[2].signal, SIGKILL) << testing::describe(exits[2]);
}

// Process 2 asks to join and is killed while it waits: the store withdraws its request, and
// the group's grow() skips it; process 3, which asks afterwards, is admitted as rank 2.
TEST_P(Grow, AJoinerThatDiesWhileItWaitsIsSkipped) {
  const auto exits = testing::run_ranks(
      4,
      [&](const testing::RankContext& ctx) {
        log::reload_from_env();
        auto store = ctx.store();
        const std::string withdrawn[] = {std::string(kGroup) + "/join/answer/1"};
        if (ctx.rank == 2) {
          std::thread asking([&] { (void)Communicator::join(store, group_options()); });
          wait_for_request(*ctx.store(), 1);
          std::raise(SIGKILL);
        }
        if (ctx.rank == 3) {
          const std::string skipped[] = {"skipped/0", "skipped/1"};
          store->wait(skipped);
          auto comm = Communicator::join(store, group_options());
          EXPECT_EQ(comm->rank(), 2);
          EXPECT_EQ(sum_of(*comm, 1.0), 3.0);
          return;
        }
        auto group = Communicator::create(store, ctx.rank, 2, group_options());
        store->wait(withdrawn);
        EXPECT_EQ(store->get(withdrawn[0]), "withdrawn");
        EXPECT_EQ(group->grow(), nullptr);
        store->set("skipped/" + std::to_string(ctx.rank), "1");
        wait_for_request(*store, 2);  // process 3 asks once both skipped process 2
        auto comm = group->grow();
        ASSERT_NE(comm, nullptr);
        EXPECT_EQ(comm->size(), 3);
        EXPECT_EQ(sum_of(*comm, 1.0), 3.0);
      },
      run_options(GetParam()));
  ASSERT_EQ(exits.size(), 4u);
  for (const int r : {0, 1, 3})
    EXPECT_TRUE(exits[static_cast<std::size_t>(r)].ok()) << testing::describe(exits[r]);
}

INSTANTIATE_TEST_SUITE_P(Transports, Grow, ::testing::Values("shm", "tcp"), transport_name);

// Nobody admits the joiner: it gives up at its timeout with an error that says what grow()
// is, and withdraws, so that a group started afterwards does not admit it.
TEST(Join, NobodyAdmitsItInTimeAndItWithdraws) {
  auto store = std::make_shared<store::HashStore>();
  CommOptions o = group_options();
  o.timeout = std::chrono::milliseconds(200);
  try {
    (void)Communicator::join(store, o);
    ADD_FAILURE() << "join() returned without a group";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Timeout) << e.what();
    EXPECT_NE(e.message().find("grow()"), std::string::npos) << e.what();
    EXPECT_NE(e.message().find(kGroup), std::string::npos) << e.what();
  }
  EXPECT_EQ(store->get(std::string(kGroup) + "/join/answer/1"), "withdrawn");
  auto group = Communicator::create(store, 0, 1, group_options());
  EXPECT_EQ(group->grow(), nullptr);
}

// stop_admitting() ends the wait of a process in join() with Aborted, and the join() of one
// that asks afterwards at once.
TEST(Join, StopAdmittingEndsTheWaitOfJoiners) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        log::reload_from_env();
        auto store = ctx.store();
        if (ctx.rank == 0) {
          auto group = Communicator::create(store, 0, 1, group_options());
          wait_for_request(*store, 1);
          group->stop_admitting();
          return;
        }
        for (int attempt = 0; attempt < 2; ++attempt) {
          try {
            (void)Communicator::join(store, group_options());
            ADD_FAILURE() << "joined a group that stopped admitting";
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::Aborted) << e.what();
            EXPECT_NE(e.message().find("stopped admitting"), std::string::npos) << e.what();
          }
        }
      },
      run_options("tcp"));
  testing::expect_all_ok(exits);
}

// grow()'s wait must be shorter than the timeout within which the other ranks wait for it.
TEST(Grow, AWaitAsLongAsTheTimeoutIsRefused) {
  auto store = std::make_shared<store::HashStore>();
  CommOptions o = group_options();
  o.timeout = std::chrono::seconds(5);
  auto group = Communicator::create(store, 0, 1, o);
  EXPECT_THROW((void)group->grow(1, std::chrono::seconds(5)), Error);
  EXPECT_EQ(group->grow(1, std::chrono::milliseconds(1)), nullptr);
}

// Split communicators admit nobody; the world they come from does.
TEST(Grow, SplitCommunicatorsRefuse) {
  auto store = std::make_shared<store::HashStore>();
  auto world = Communicator::create(store, 0, 1, group_options());
  auto part = world->split(0, 0);
  ASSERT_NE(part, nullptr);
  try {
    (void)part->grow();
    ADD_FAILURE() << "a split communicator grew";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    EXPECT_NE(e.message().find("split()"), std::string::npos) << e.what();
  }
  EXPECT_EQ(world->grow(), nullptr);
}

}  // namespace
}  // namespace tandem::mptest
