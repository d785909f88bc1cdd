// Setup's first contacts: the peers every rank connects at setup (setup_peers), the allgather
// of every rank's record over those connections, and the connector's handshakes when both
// ranks of a pair dial at once.

#include "transport/exchange.hpp"

#include "core/net.hpp"
#include "mesh_test_util.hpp"
#include "transport/tcp/connector.hpp"
#include "transport/tcp/context.hpp"
#include "transport/tcp/wire.hpp"

#include <tandem/error.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <map>
#include <set>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace tandem::transport::test {
namespace {

using namespace std::chrono_literals;

TEST(SetupPeers, SymmetricLogarithmicAndHoldTheRingAndTheHypercube) {
  for (int n : {2, 3, 4, 5, 6, 7, 8, 9, 13, 16, 31, 33, 64, 100, 256, 1000, 16384}) {
    std::vector<std::set<int>> of(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      if (n > 300 && r % (n / 100) != 0 && r != n - 1) continue;  // a sample of the big ones
      const auto peers = setup_peers(r, n);
      EXPECT_TRUE(std::is_sorted(peers.begin(), peers.end())) << n;
      EXPECT_LE(peers.size(), 2u * std::bit_width(static_cast<unsigned>(n - 1))) << n;
      std::set<int> s(peers.begin(), peers.end());
      EXPECT_EQ(s.size(), peers.size()) << "duplicates at " << r << " of " << n;
      EXPECT_EQ(s.count(r), 0u);
      EXPECT_EQ(s.count((r + 1) % n), 1u) << "ring successor of " << r << " of " << n;
      EXPECT_EQ(s.count((r + n - 1) % n), 1u) << "ring predecessor of " << r << " of " << n;
      if (std::has_single_bit(static_cast<unsigned>(n))) {
        // Recursive doubling's partners and the binomial tree of root 0 are among them.
        for (int d = 1; d < n; d *= 2) EXPECT_EQ(s.count(r ^ d), 1u) << r << " of " << n;
      }
      for (int q : peers) {
        const auto back = setup_peers(q, n);
        EXPECT_TRUE(std::binary_search(back.begin(), back.end(), r))
            << q << " lists no " << r << " of " << n;
      }
    }
  }
  EXPECT_EQ(setup_peers(0, 2), std::vector<int>{1});
  EXPECT_EQ(setup_peers(0, 8), (std::vector<int>{1, 2, 4, 6, 7}));
  EXPECT_EQ(setup_peers(3, 6), (std::vector<int>{1, 2, 4, 5}));
}

// A full set of connected socket pairs between n ranks (only the setup peers are used).
struct Wires {
  explicit Wires(int ranks) {
    for (int a = 0; a < ranks; ++a)
      for (int b = a + 1; b < ranks; ++b) {
        int sv[2];
        EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
        fds[{a, b}] = net::Fd(sv[0]);
        fds[{b, a}] = net::Fd(sv[1]);
      }
  }
  int fd(int from, int to) { return fds.at({from, to}).get(); }
  std::map<std::pair<int, int>, net::Fd> fds;
};

std::string record_of(int rank) {
  // Sizes from empty to near the bound, so frames span many socket buffers.
  const std::size_t len = rank % 4 == 3 ? kMaxRecordBytes : static_cast<std::size_t>(rank * 37);
  std::string s(len, '\0');
  for (std::size_t i = 0; i < len; ++i) s[i] = static_cast<char>('a' + (i * 7 + rank) % 26);
  return s;
}

TEST(AllgatherRecords, EveryRankGetsEveryRecordAtEverySize) {
  for (int n : {2, 3, 5, 6, 8, 13, 17}) {
    Wires w(n);
    std::vector<std::vector<std::string>> got(static_cast<std::size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        try {
          got[static_cast<std::size_t>(r)] = allgather_records(
              r, n, record_of(r), [&](int p) { return w.fd(r, p); }, deadline_in(60s));
        } catch (const Error& e) {
          ADD_FAILURE() << "rank " << r << " of " << n << ": " << e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(got[static_cast<std::size_t>(r)].size(), static_cast<std::size_t>(n));
      for (int p = 0; p < n; ++p)
        EXPECT_EQ(got[static_cast<std::size_t>(r)][static_cast<std::size_t>(p)], record_of(p))
            << "rank " << r << "'s copy of rank " << p << "'s record, " << n << " ranks";
    }
  }
}

TEST(AllgatherRecords, APeerThatClosesOrSendsJunkIsNamed) {
  {
    Wires w(2);
    w.fds.erase({1, 0});  // rank 1 is gone: its end is closed
    const Error e = expect_error([&] {
      allgather_records(
          0, 2, "x", [&](int p) { return w.fd(0, p); }, deadline_in(10s));
    });
    EXPECT_EQ(e.code(), ErrorCode::PeerLost) << e.what();
    EXPECT_NE(e.message().find("rank 1"), std::string::npos) << e.what();
  }
  {
    Wires w(2);
    const std::string junk(64, 'j');
    ASSERT_EQ(::write(w.fd(1, 0), junk.data(), junk.size()), 64);
    const Error e = expect_error([&] {
      allgather_records(
          0, 2, "x", [&](int p) { return w.fd(0, p); }, deadline_in(10s));
    });
    EXPECT_EQ(e.code(), ErrorCode::Internal) << e.what();
    EXPECT_NE(e.message().find("rank 1"), std::string::npos) << e.what();
  }
  {
    // A frame that announces more than the bound is refused before anything is allocated.
    Wires w(2);
    struct {
      std::uint32_t magic = 0x584e4454, count = 1;
      std::uint64_t bytes = std::uint64_t{1} << 40;
    } head;
    ASSERT_EQ(::write(w.fd(1, 0), &head, sizeof head), static_cast<ssize_t>(sizeof head));
    const Error e = expect_error([&] {
      allgather_records(
          0, 2, "x", [&](int p) { return w.fd(0, p); }, deadline_in(10s));
    });
    EXPECT_EQ(e.code(), ErrorCode::Internal) << e.what();
  }
  {
    Wires w(2);  // rank 1 never answers
    const Error e = expect_error([&] {
      allgather_records(
          0, 2, "x", [&](int p) { return w.fd(0, p); }, deadline_in(200ms));
    });
    EXPECT_EQ(e.code(), ErrorCode::Timeout) << e.what();
    EXPECT_NE(e.message().find("rank 1"), std::string::npos) << e.what();
  }
}

// Two ranks of a group of 4, stepped in turn on this thread: every interleaving is driven by
// the order of the calls, not by timing.
struct Pair {
  tcp::Context lo{1, 4, "127.0.0.1", "tok"};
  tcp::Context hi{3, 4, "127.0.0.1", "tok"};
  Pair(int streams) {
    lo.connector().set_target(3, {"127.0.0.1", hi.port(), streams, true});
    hi.connector().set_target(1, {"127.0.0.1", lo.port(), streams, true});
  }
  // Steps both until each has its connection, then checks that they are one and the same.
  void settle_and_check(int streams) {
    std::vector<std::pair<int, tcp::PeerSockets>> a, b;
    const auto until = Clock::now() + 20s;
    while ((a.empty() || b.empty()) && Clock::now() < until) {
      lo.connector().step();
      hi.connector().step();
      for (auto& x : lo.connector().take_connected()) a.push_back(std::move(x));
      for (auto& x : hi.connector().take_connected()) b.push_back(std::move(x));
    }
    ASSERT_EQ(a.size(), 1u);
    ASSERT_EQ(b.size(), 1u);
    EXPECT_EQ(a[0].first, 3);
    EXPECT_EQ(b[0].first, 1);
    EXPECT_FALSE(lo.connector().connecting(3));
    EXPECT_FALSE(hi.connector().connecting(1));
    ASSERT_EQ(a[0].second.data.size(), static_cast<std::size_t>(streams));
    ASSERT_EQ(b[0].second.data.size(), static_cast<std::size_t>(streams));
    // Every socket of one side is connected to the socket of the same purpose on the other.
    std::vector<std::pair<int, int>> ends = {
        {a[0].second.control.get(), b[0].second.control.get()}};
    for (int k = 0; k < streams; ++k)
      ends.emplace_back(a[0].second.data[static_cast<std::size_t>(k)].get(),
                        b[0].second.data[static_cast<std::size_t>(k)].get());
    for (std::size_t k = 0; k < ends.size(); ++k) {
      const char out[2] = {static_cast<char>('A' + k), static_cast<char>('a' + k)};
      net::write_full(ends[k].first, &out[0], 1, deadline_in(5s));
      net::write_full(ends[k].second, &out[1], 1, deadline_in(5s));
      char in[2] = {};
      net::read_full(ends[k].second, &in[0], 1, deadline_in(5s));
      net::read_full(ends[k].first, &in[1], 1, deadline_in(5s));
      EXPECT_EQ(in[0], out[0]) << "socket " << k;
      EXPECT_EQ(in[1], out[1]) << "socket " << k;
    }
    EXPECT_EQ(lo.rejected() + hi.rejected(), 0u);
  }
};

TEST(ConnectOnDemand, EitherRankDialsAlone) {
  for (int streams : {1, 3}) {
    {
      Pair p(streams);
      p.lo.connector().dial(3);
      p.settle_and_check(streams);
    }
    {
      Pair p(streams);
      p.hi.connector().dial(1);
      p.settle_and_check(streams);
    }
  }
}

TEST(ConnectOnDemand, BothDialAtOnceAndKeepOneConnection) {
  for (int streams : {1, 2}) {
    for (int order = 0; order < 4; ++order) {
      Pair p(streams);
      // Both dial before either steps; then the steps begin on one side or the other, or the
      // higher rank's HELLO is already answered when the lower one dials.
      if (order == 3) {
        p.hi.connector().dial(1);
        p.hi.connector().step();
        p.lo.connector().step();  // lo accepts hi's control connection: no dial from lo now
        p.lo.connector().dial(3);
      } else {
        p.lo.connector().dial(3);
        p.hi.connector().dial(1);
        if (order == 1) p.hi.connector().step();
        if (order == 2) p.lo.connector().step();
      }
      SCOPED_TRACE(::testing::Message() << "order " << order << ", streams " << streams);
      p.settle_and_check(streams);
    }
  }
}

TEST(ConnectOnDemand, ARefusedDialMarksThePeerGoneOnceSetupIsOver) {
  tcp::Context me(0, 2, "127.0.0.1", "tok");
  std::uint16_t dead_port = 0;
  {
    tcp::Context gone(1, 2, "127.0.0.1", "tok");
    dead_port = gone.port();
  }  // its listener is closed: nothing listens on that port now
  me.connector().set_target(1, {"127.0.0.1", dead_port, 1, true});
  me.connector().refusal_is_final();
  me.connector().dial(1);
  const auto until = Clock::now() + 20s;
  while (!me.connector().refused(1) && Clock::now() < until) me.connector().step();
  EXPECT_TRUE(me.connector().refused(1));
  EXPECT_NE(me.connector().status(1).find("refused"), std::string::npos)
      << me.connector().status(1);
}

// Setup's connect() waits for a lower peer to dial, and dials it too once kLivenessPoll has
// passed: a lower peer that died after publishing its address is refused, and only that
// failure asks check_peers (the store) whether a rank is gone.
TEST(ConnectOnDemand, SetupDialsALowerPeerThatNeverDialsAndAsksOnlyOnFailure) {
  tcp::Context me(2, 3, "127.0.0.1", "tok");
  std::uint16_t dead_port = 0;
  {
    tcp::Context gone(1, 3, "127.0.0.1", "tok");
    dead_port = gone.port();
  }
  me.connector().set_target(1, {"127.0.0.1", dead_port, 1, true});
  int checks = 0;
  std::string first_status;
  const int peers[] = {1};
  try {
    me.connector().connect(peers, deadline_in(30s), [&] {
      if (++checks == 1) first_status = me.connector().status(1);
      if (checks == 2) TANDEM_THROW(ErrorCode::PeerLost, "rank 1 is gone (the test's store)");
    });
    ADD_FAILURE() << "connected to a rank that is not there";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::PeerLost) << e.what();
  }
  // The first check came with a failed dial of this rank's (not from waiting), the second
  // with the retry's.
  EXPECT_EQ(checks, 2);
  EXPECT_NE(first_status.find("connecting to rank 1"), std::string::npos) << first_status;
  EXPECT_NE(first_status.find("refused"), std::string::npos) << first_status;
}

}  // namespace
}  // namespace tandem::transport::test
