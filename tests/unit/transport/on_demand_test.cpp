// Connections at the first message: a mesh of real processes over tcp, where setup connects
// each rank to its setup_peers() only. Every pair exchanging at once (both sides dial), one
// side's message while the other waits for a third rank, a peer that dies or leaves before
// and after its connection is made, a frozen peer, and what setup opens.

#include "mesh_test_util.hpp"
#include "transport/exchange.hpp"

#include <csignal>
#include <dirent.h>
#include <sys/stat.h>

namespace tandem::transport::test {
namespace {

using testing::RankContext;
using namespace std::chrono_literals;

MeshOptions tcp_options(int streams = 1) {
  return options_for(LinkParam{"tcp", true, streams});
}

bool is_setup_peer(int a, int b, int n) {
  const auto peers = setup_peers(a, n);
  return std::binary_search(peers.begin(), peers.end(), b);
}

// Every rank sends a distinct message to every other and receives from every other, all
// posted at once: each pair not connected at setup is dialed from both sides together.
TEST(OnDemand, EveryPairExchangesAtOnce) {
  for (int n : {2, 6, 9, 16}) {
    for (int streams : {1, 2}) {
      if (n > 9 && streams > 1) continue;
      SCOPED_TRACE(::testing::Message() << n << " ranks, " << streams << " stream(s)");
      testing::expect_all_ok(testing::run_ranks(
          n,
          [&](const RankContext& ctx) {
            auto m = connect(ctx, tcp_options(streams));
            const std::size_t bytes = 1000 + 4099 * static_cast<std::size_t>(ctx.rank);
            std::vector<std::vector<std::uint8_t>> out, in;
            std::vector<Request> reqs;
            reqs.reserve(2 * static_cast<std::size_t>(n));
            for (int p = 0; p < n; ++p) {
              if (p == ctx.rank) continue;
              out.push_back(make_payload(ctx.rank, p, 0, bytes));
              in.emplace_back(1000 + 4099 * static_cast<std::size_t>(p));
              reqs.push_back(Request::make_send(p, 5, out.back().data(), out.back().size()));
              reqs.push_back(Request::make_recv(p, 5, in.back().data(), in.back().size()));
            }
            std::vector<Request*> ptrs;
            for (Request& r : reqs) {
              m.mesh->post(r);
              ptrs.push_back(&r);
            }
            m.mesh->wait(ptrs, deadline_in(60s));
            std::size_t k = 0;
            for (int p = 0; p < n; ++p) {
              if (p == ctx.rank) continue;
              EXPECT_EQ(first_bad(in[k++], p, ctx.rank, 0), -1) << "from rank " << p;
            }
            // A second round runs over the connections the first one made.
            for (Request& r : reqs) m.mesh->post(r);
            m.mesh->wait(ptrs, deadline_in(60s));
            k = 0;
            for (int p = 0; p < n; ++p) {
              if (p == ctx.rank) continue;
              EXPECT_EQ(first_bad(in[k++], p, ctx.rank, 0), -1) << "round 2, from rank " << p;
            }
          },
          run_options(unique_run_id("pairs"))));
    }
  }
}

// 8 ranks: 0-3 and 0-5 are not setup peers, 3-5 are. Rank 3's first message to rank 0 must
// complete while rank 0 waits for rank 5, which sends only after rank 3's next message. A
// connection that only its dialer could make would leave this waiting forever.
TEST(OnDemand, AFirstMessageCompletesWhileThePeerWaitsForAnotherRank) {
  ASSERT_FALSE(is_setup_peer(0, 3, 8));
  ASSERT_FALSE(is_setup_peer(0, 5, 8));
  ASSERT_TRUE(is_setup_peer(3, 5, 8));
  testing::expect_all_ok(testing::run_ranks(
      8,
      [&](const RankContext& ctx) {
        auto m = connect(ctx, tcp_options());
        std::vector<std::uint8_t> a = make_payload(3, 0, 1, 64), b = make_payload(3, 5, 1, 64),
                                  c = make_payload(5, 0, 1, 64);
        std::vector<std::uint8_t> got(64);
        auto send = [&](int to, std::vector<std::uint8_t>& v) {
          Request s = Request::make_send(to, 9, v.data(), v.size());
          m.mesh->post(s);
          m.mesh->wait(s, deadline_in(30s));
        };
        auto recv = [&](int from, int from_rank_pattern, int to) {
          Request r = Request::make_recv(from, 9, got.data(), got.size());
          m.mesh->post(r);
          m.mesh->wait(r, deadline_in(30s));
          EXPECT_EQ(first_bad(got, from_rank_pattern, to, 1), -1) << "from rank " << from;
        };
        if (ctx.rank == 3) {
          send(0, a);
          send(5, b);
        } else if (ctx.rank == 5) {
          recv(3, 3, 5);
          send(0, c);
        } else if (ctx.rank == 0) {
          recv(5, 5, 0);
          recv(3, 3, 0);
        }
      },
      run_options(unique_run_id("third"))));
}

// What a rank opens at setup: its listener, the store's connection, and a control and a
// data socket per setup peer, not one per rank.
int open_sockets() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (dirent* e = ::readdir(d)) {
    struct stat st {};
    if (::fstatat(::dirfd(d), e->d_name, &st, 0) == 0 && S_ISSOCK(st.st_mode)) ++n;
  }
  ::closedir(d);
  return n;
}

TEST(OnDemand, SetupOpensSocketsForItsSetupPeersOnly) {
  constexpr int kRanks = 16;
  testing::expect_all_ok(testing::run_ranks(
      kRanks,
      [&](const RankContext& ctx) {
        auto store = ctx.store();
        const int before = open_sockets();
        auto mesh = connect_mesh(*store, ctx.rank, kRanks, tcp_options());
        const int opened = open_sockets() - before;
        const int setup = static_cast<int>(setup_peers(ctx.rank, kRanks).size());
        // 1 listener + 2 per setup peer; 2 per peer (30) before connections on demand.
        EXPECT_EQ(opened, 1 + 2 * setup) << "rank " << ctx.rank;
        EXPECT_LT(opened, 2 * (kRanks - 1));
        mesh->close();
      },
      run_options(unique_run_id("count"))));
}

// A rank that is gone before anyone connected to it: one killed, one that closed its mesh.
// The first message to it fails with PeerLost naming it, well before the deadline.
TEST(OnDemand, APeerGoneBeforeItsConnectionIsNamed) {
  for (const bool killed : {true, false}) {
    SCOPED_TRACE(killed ? "killed" : "closed");
    auto exits = testing::run_ranks(
        8,
        [&](const RankContext& ctx) {
          auto m = connect(ctx, tcp_options());
          if (ctx.rank == 3) {
            if (killed) ::raise(SIGKILL);
            m.mesh->close();
            m.store->set("closed", "1");
            return;
          }
          if (ctx.rank != 0) return;
          ASSERT_FALSE(is_setup_peer(0, 3, 8));
          if (!killed) m.store->get("closed", deadline_in(30s));
          std::vector<std::uint8_t> buf(16);
          const auto start = Clock::now();
          const Error e = expect_error([&] {
            Request s = Request::make_send(3, 1, buf.data(), buf.size());
            m.mesh->post(s);
            m.mesh->wait(s, deadline_in(60s));
          });
          EXPECT_EQ(e.code(), ErrorCode::PeerLost) << e.what();
          EXPECT_NE(e.message().find("rank 3"), std::string::npos) << e.what();
          EXPECT_LT(seconds_since(start), 50.0) << "named only at the deadline: " << e.what();
          std::fprintf(stderr, "rank 0 (%s peer): %s\n", killed ? "killed" : "closed", e.what());
        },
        run_options(unique_run_id("gone-before")));
    EXPECT_TRUE(exits[0].ok()) << testing::describe(exits[0]);
  }
}

// A connection made at the first message watches its peer as setup's do (0-3: not setup
// peers of 8 ranks).
TEST(OnDemand, APeerThatDiesAfterItsConnectionIsNamed) {
  auto exits = testing::run_ranks(
      8,
      [&](const RankContext& ctx) {
        auto m = connect(ctx, tcp_options());
        if (ctx.rank != 0 && ctx.rank != 3) return;
        const int other = 3 - ctx.rank;
        std::vector<std::uint8_t> out = make_payload(ctx.rank, other, 2, 5000), in(5000);
        Request s = Request::make_send(other, 2, out.data(), out.size());
        Request r = Request::make_recv(other, 2, in.data(), in.size());
        m.mesh->post(s);
        m.mesh->post(r);
        Request* both[] = {&s, &r};
        m.mesh->wait(both, deadline_in(30s));
        EXPECT_EQ(first_bad(in, other, ctx.rank, 2), -1);
        if (ctx.rank == 3) ::raise(SIGKILL);
        const Error e = expect_error([&] {
          Request again = Request::make_recv(3, 3, in.data(), 8);
          m.mesh->post(again);
          m.mesh->wait(again, deadline_in(60s));
        });
        EXPECT_EQ(e.code(), ErrorCode::PeerLost) << e.what();
        EXPECT_NE(e.message().find("rank 3"), std::string::npos) << e.what();
      },
      run_options(unique_run_id("gone-after")));
  EXPECT_TRUE(exits[0].ok()) << testing::describe(exits[0]);
}

// Rank 0 is not connected to rank 3, and waits for rank 1 only; rank 3 dies. Rank 3's setup
// peers see the death and pass it on, so rank 0 hears of it from them (PeerLost naming rank 3),
// not at its deadline.
TEST(OnDemand, ADeathReachesRanksNotConnectedToTheDeadRank) {
  ASSERT_FALSE(is_setup_peer(0, 3, 8));
  auto exits = testing::run_ranks(
      8,
      [&](const RankContext& ctx) {
        auto m = connect(ctx, tcp_options());
        if (ctx.rank == 3) {
          std::vector<std::string> posted;
          for (int p = 0; p < 8; ++p)
            if (p != 3) posted.push_back("posted/" + std::to_string(p));
          m.store->wait(posted, deadline_in(30s));  // every other rank is waiting now
          ::raise(SIGKILL);
        }
        // Every rank waits for its ring successor, which never sends.
        std::vector<std::uint8_t> buf(8);
        Request r = Request::make_recv((ctx.rank + 1) % 8, 1, buf.data(), buf.size());
        m.mesh->post(r);
        m.store->set("posted/" + std::to_string(ctx.rank), "1");
        const Error e = expect_error([&] { m.mesh->wait(r, deadline_in(20s)); });
        EXPECT_EQ(e.code(), ErrorCode::PeerLost) << "rank " << ctx.rank << ": " << e.what();
        EXPECT_NE(e.message().find("rank 3"), std::string::npos) << e.what();
        // The meshes stay open (a closing mesh says why to every peer anyway) until rank 0
        // has heard.
        if (ctx.rank == 0) m.store->set("heard", "1");
        m.store->get("heard", deadline_in(30s));
      },
      run_options(unique_run_id("relay")));
  for (const auto& e : exits) {
    if (e.rank != 3) {
      EXPECT_TRUE(e.ok()) << testing::describe(e);
    }
  }
}

// A peer alive but never inside a mesh call cannot answer: the first message to it times out
// at its deadline, and the error says the connection is what is missing.
TEST(OnDemand, AFrozenPeerTimesOutNamingTheMissingConnection) {
  testing::expect_all_ok(testing::run_ranks(
      8,
      [&](const RankContext& ctx) {
        auto m = connect(ctx, tcp_options());
        if (ctx.rank == 3) {
          m.store->get("done", deadline_in(60s));  // frozen: no mesh call until rank 0 is done
          return;
        }
        if (ctx.rank != 0) return;
        std::vector<std::uint8_t> buf(16);
        const Error e = expect_error([&] {
          Request r = Request::make_recv(3, 1, buf.data(), buf.size());
          m.mesh->post(r);
          m.mesh->wait(r, deadline_in(1500ms));
        });
        m.store->set("done", "1");
        EXPECT_EQ(e.code(), ErrorCode::Timeout) << e.what();
        EXPECT_NE(e.message().find("not connected"), std::string::npos) << e.what();
        EXPECT_NE(e.message().find("rank 3"), std::string::npos) << e.what();
      },
      run_options(unique_run_id("frozen"))));
}

}  // namespace
}  // namespace tandem::transport::test
