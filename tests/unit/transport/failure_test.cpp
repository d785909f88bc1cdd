// Failure paths: mismatched receives, killed ranks (idle and mid-transfer), abort(),
// close(), deadlines, leftover shm segments and peers with the wrong token.

#include "mesh_test_util.hpp"

#include <csignal>
#include <thread>

namespace tandem::transport::test {
namespace {

using testing::RankContext;
using namespace std::chrono_literals;

class Failure : public ::testing::TestWithParam<LinkParam> {};

void send_bytes(Mesh& mesh, int peer, std::uint32_t tag, std::size_t n) {
  std::vector<std::uint8_t> buf(n, 1);
  Request s = Request::make_send(peer, tag, buf.data(), n);
  mesh.post(s);
  mesh.wait(s, deadline_in(30s));
}

void recv_bytes(Mesh& mesh, int peer, std::uint32_t tag, std::size_t n, Deadline deadline) {
  std::vector<std::uint8_t> buf(n);
  Request r = Request::make_recv(peer, tag, buf.data(), n);
  mesh.post(r);
  mesh.wait(r, deadline);
}

TEST_P(Failure, MismatchedSizeOrTagNamesThePeer) {
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const RankContext& ctx) {
        auto m = connect(ctx, options_for(GetParam()));
        if (ctx.rank == 0) {
          send_bytes(*m.mesh, 1, 7, 100);
          // Rank 1 aborts on the mismatch and says why.
          const Error e = expect_error([&] { recv_bytes(*m.mesh, 1, 8, 4, deadline_in(30s)); });
          EXPECT_EQ(e.code(), ErrorCode::Aborted) << e.what();
          EXPECT_NE(e.message().find("rank 1"), std::string::npos) << e.what();
          EXPECT_NE(e.message().find("mismatch"), std::string::npos) << e.what();
        } else {
          const Error e = expect_error([&] { recv_bytes(*m.mesh, 0, 7, 200, deadline_in(30s)); });
          EXPECT_EQ(e.code(), ErrorCode::Mismatch) << e.what();
          EXPECT_NE(e.message().find("rank 0"), std::string::npos) << e.what();
          EXPECT_NE(e.message().find("200"), std::string::npos) << e.what();
          EXPECT_NE(e.message().find("100"), std::string::npos) << e.what();
          // The mesh is poisoned: every later call throws the same error.
          Request again = Request::make_send(0, 1, nullptr, 0);
          EXPECT_EQ(expect_error([&] { m.mesh->post(again); }).code(), ErrorCode::Mismatch);
          EXPECT_TRUE(m.mesh->error() != nullptr);
        }
      },
      run_options(unique_run_id("mismatch"))));
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const RankContext& ctx) {
        auto m = connect(ctx, options_for(GetParam()));
        if (ctx.rank == 0) {
          send_bytes(*m.mesh, 1, 0xA, 16);
        } else {
          const Error e = expect_error([&] { recv_bytes(*m.mesh, 0, 0xB, 16, deadline_in(30s)); });
          EXPECT_EQ(e.code(), ErrorCode::Mismatch) << e.what();
          EXPECT_NE(e.message().find("0x0000000b"), std::string::npos) << e.what();
          EXPECT_NE(e.message().find("0x0000000a"), std::string::npos) << e.what();
        }
      },
      run_options(unique_run_id("mismatch-tag"))));
}

// Rank 2 dies once the others are waiting on it; both must fail with PeerLost naming it.
TEST_P(Failure, KilledPeerFailsEveryWaiter) {
  const auto id = unique_run_id("kill");
  const auto exits = testing::run_ranks(
      3,
      [&](const RankContext& ctx) {
        auto m = connect(ctx, options_for(GetParam()));
        if (ctx.rank == 2) {
          recv_bytes(*m.mesh, 0, 1, 8, deadline_in(30s));
          recv_bytes(*m.mesh, 1, 1, 8, deadline_in(30s));
          std::raise(SIGKILL);
        }
        send_bytes(*m.mesh, 2, 1, 8);
        // Rank 0 waits on the dead rank itself; rank 1 waits on rank 0, which never sends:
        // the death is noticed on a control connection nobody is waiting on.
        const int from = ctx.rank == 0 ? 2 : 0;
        const auto start = Clock::now();
        const Error e = expect_error([&] { recv_bytes(*m.mesh, from, 2, 8, deadline_in(60s)); });
        const double took = seconds_since(start);
        EXPECT_EQ(e.code(), ErrorCode::PeerLost) << e.what();
        EXPECT_NE(e.message().find("rank 2"), std::string::npos) << e.what();
        EXPECT_NE(e.message().find("died"), std::string::npos) << e.what();
        EXPECT_LT(took, 10.0);
        std::printf("rank %d (%s): peer death detected after %.3f s\n", ctx.rank, GetParam().name,
                    took);
      },
      run_options(id));
  ASSERT_EQ(exits.size(), 3u);
  EXPECT_TRUE(exits[0].ok()) << testing::describe(exits[0]);
  EXPECT_TRUE(exits[1].ok()) << testing::describe(exits[1]);
  EXPECT_EQ(exits[2].signal, SIGKILL) << testing::describe(exits[2]);
  EXPECT_TRUE(shm_leftovers(id).empty());
}

// A rank dies while its peer is blocked in the middle of a 64 MiB transfer: as receiver (the
// sender waits for buffer space) and as sender (the receiver waits for the rest). The victim
// stops progressing after a bounded amount, so the survivor is always mid-transfer.
TEST_P(Failure, KilledMidTransfer) {
  for (int victim : {1, 0}) {
    const auto id = unique_run_id("killmid");
    const auto exits = testing::run_ranks(
        2,
        [&](const RankContext& ctx) {
          auto m = connect(ctx, options_for(GetParam()));
          constexpr std::size_t n = 64u << 20;
          std::vector<std::uint8_t> buf(n, 3);
          Request req = ctx.rank == 0 ? Request::make_send(1, 4, buf.data(), n)
                                      : Request::make_recv(0, 4, buf.data(), n);
          m.mesh->post(req);
          Request* one[] = {&req};
          if (ctx.rank == victim) {
            if (victim == 0) {  // the sender fills what buffers there are, then dies
              const auto until = Clock::now() + 30s;
              while (req.done < (1u << 20) && Clock::now() < until) m.mesh->test(one);
              m.store->set("partial", "1");
            }
            m.store->get("survivor-waits", deadline_in(30s));
            std::raise(SIGKILL);
          }
          if (victim == 1) {  // the sender has started and fills the buffers
            const auto until = Clock::now() + 30s;
            while (req.done < (1u << 20) && Clock::now() < until) m.mesh->test(one);
          } else {
            m.store->get("partial", deadline_in(30s));
          }
          m.store->set("survivor-waits", "1");
          const auto start = Clock::now();
          const Error e = expect_error([&] { m.mesh->wait(one, deadline_in(60s)); });
          EXPECT_EQ(e.code(), ErrorCode::PeerLost) << e.what();
          EXPECT_NE(e.message().find(fmt::format("rank {}", victim)), std::string::npos)
              << e.what();
          EXPECT_LT(seconds_since(start), 10.0);
          EXPECT_GT(req.done, 0u);
          EXPECT_LT(req.done, n);
          std::printf(
              "rank %d (%s): death of rank %d detected %.3f s into the wait, %zu of %zu bytes "
              "moved\n",
              ctx.rank, GetParam().name, victim, seconds_since(start), req.done, n);
        },
        run_options(id));
    EXPECT_TRUE(exits[1 - victim].ok()) << testing::describe(exits[1 - victim]);
    EXPECT_EQ(exits[victim].signal, SIGKILL) << testing::describe(exits[victim]);
    EXPECT_TRUE(shm_leftovers(id).empty());
  }
}

TEST_P(Failure, AbortReachesEveryPeerWithItsReason) {
  testing::expect_all_ok(testing::run_ranks(
      3,
      [&](const RankContext& ctx) {
        auto m = connect(ctx, options_for(GetParam()));
        if (ctx.rank == 1) {
          m.mesh->abort(Error(ErrorCode::Aborted, "the user gave up (reason 42)"));
          EXPECT_EQ(expect_error([&] { send_bytes(*m.mesh, 0, 1, 1); }).code(), ErrorCode::Aborted);
          m.mesh->abort(Error(ErrorCode::Aborted, "twice"));  // idempotent
          // Stay alive until the others saw the abort, so they see it and not the exit.
          m.store->get("seen0", deadline_in(30s));
          m.store->get("seen2", deadline_in(30s));
          return;
        }
        const int other = ctx.rank == 0 ? 2 : 0;  // not the aborting rank
        const Error e = expect_error([&] { recv_bytes(*m.mesh, other, 1, 8, deadline_in(30s)); });
        m.store->set(fmt::format("seen{}", ctx.rank), "1");
        EXPECT_EQ(e.code(), ErrorCode::Aborted) << e.what();
        EXPECT_NE(e.message().find("rank 1"), std::string::npos) << e.what();
        EXPECT_NE(e.message().find("the user gave up (reason 42)"), std::string::npos) << e.what();
      },
      run_options(unique_run_id("abort"))));
}

// A watchdog thread aborts while the rank's own thread waits for a message that never comes.
TEST_P(Failure, AbortFromAnotherThreadEndsTheWait) {
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const RankContext& ctx) {
        auto m = connect(ctx, options_for(GetParam()));
        const auto start = Clock::now();
        std::thread watchdog;
        if (ctx.rank == 0)
          watchdog =
              std::thread([&] { m.mesh->abort(Error(ErrorCode::Aborted, "watchdog fired")); });
        const Error e =
            expect_error([&] { recv_bytes(*m.mesh, 1 - ctx.rank, 1, 8, deadline_in(60s)); });
        if (watchdog.joinable()) watchdog.join();
        EXPECT_EQ(e.code(), ErrorCode::Aborted) << e.what();
        EXPECT_NE(e.message().find("watchdog fired"), std::string::npos) << e.what();
        if (ctx.rank == 1) {
          EXPECT_NE(e.message().find("rank 0"), std::string::npos) << e.what();
        }
        EXPECT_LT(seconds_since(start), 10.0);
      },
      run_options(unique_run_id("watchdog"))));
}

TEST_P(Failure, CloseLeavesPeersIntactUntilTheyNeedIt) {
  testing::expect_all_ok(testing::run_ranks(
      3,
      [&](const RankContext& ctx) {
        auto m = connect(ctx, options_for(GetParam()));
        if (ctx.rank == 1) {
          send_bytes(*m.mesh, 0, 1, 1000);
          recv_bytes(*m.mesh, 0, 2, 4, deadline_in(30s));  // rank 0 consumed the message
          m.mesh->close();
          m.store->set("closed", "1");
          EXPECT_EQ(expect_error([&] { send_bytes(*m.mesh, 0, 3, 1); }).code(), ErrorCode::Aborted);
          return;
        }
        if (ctx.rank == 0) {
          recv_bytes(*m.mesh, 1, 1, 1000, deadline_in(30s));
          send_bytes(*m.mesh, 1, 2, 4);
        }
        m.store->get("closed", deadline_in(30s));
        // The survivors still work together.
        const int other = 2 - ctx.rank;
        std::vector<std::uint8_t> out(300000, 9), in(300000);
        Request s = Request::make_send(other, 4, out.data(), out.size());
        Request r = Request::make_recv(other, 4, in.data(), in.size());
        m.mesh->post(s);
        m.mesh->post(r);
        Request* both[] = {&s, &r};
        m.mesh->wait(both, deadline_in(30s));
        EXPECT_EQ(in, out);
        if (ctx.rank == 0) {
          const Error e = expect_error([&] { recv_bytes(*m.mesh, 1, 5, 8, deadline_in(30s)); });
          EXPECT_EQ(e.code(), ErrorCode::PeerLost) << e.what();
          EXPECT_NE(e.message().find("rank 1"), std::string::npos) << e.what();
          EXPECT_NE(e.message().find("left normally"), std::string::npos) << e.what();
        }
      },
      run_options(unique_run_id("close"))));
}

TEST_P(Failure, DeadlineNamesThePeer) {
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const RankContext& ctx) {
        auto m = connect(ctx, options_for(GetParam()));
        if (ctx.rank == 1) {
          // The timed-out rank tells its peers why it gave up.
          const Error e = expect_error([&] { recv_bytes(*m.mesh, 0, 1, 8, deadline_in(30s)); });
          EXPECT_EQ(e.code(), ErrorCode::Aborted) << e.what();
          EXPECT_NE(e.message().find("timed out"), std::string::npos) << e.what();
          return;
        }
        const auto start = Clock::now();
        const Error e = expect_error([&] { recv_bytes(*m.mesh, 1, 0x77, 8, deadline_in(1s)); });
        const double took = seconds_since(start);
        EXPECT_EQ(e.code(), ErrorCode::Timeout) << e.what();
        EXPECT_NE(e.message().find("from rank 1"), std::string::npos) << e.what();
        EXPECT_NE(e.message().find("0 of 8 bytes"), std::string::npos) << e.what();
        // Nothing moved: the peer never posted its side (not "started and then stopped").
        EXPECT_NE(e.message().find("never posted the matching transfer"), std::string::npos)
            << e.what();
        EXPECT_GE(took, 0.99);
        EXPECT_LT(took, 10.0);
      },
      run_options(unique_run_id("deadline"))));
}

TEST_P(Failure, WrongTokenCannotConnect) {
  const auto id = unique_run_id("token");
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const RankContext& ctx) {
        MeshOptions o = options_for(GetParam());
        o.connect_timeout = 2s;
        if (ctx.rank == 1) o.token = "intruder";
        const Error e = expect_error([&] { connect(ctx, o); });
        EXPECT_EQ(e.code(), ErrorCode::Timeout) << e.what();
        if (ctx.rank == 0) {
          EXPECT_NE(e.message().find("rank 1"), std::string::npos) << e.what();
          EXPECT_NE(e.message().find("TANDEM_STORE_TOKEN"), std::string::npos) << e.what();
        }
      },
      run_options(id)));
  EXPECT_TRUE(shm_leftovers(id).empty());
}

INSTANTIATE_TEST_SUITE_P(Links, Failure, ::testing::Values(kShm, kTcp, kTcpStriped), link_name);

}  // namespace
}  // namespace tandem::transport::test
