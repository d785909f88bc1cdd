// In-process tests of the pieces under the mesh: shm segments and endpoints driven by hand
// in one thread (both sides), tcp endpoints over socket pairs, the HELLO checks and the
// handshake turning strangers away.

#include "transport/tcp/endpoint.hpp"

#include "mesh_test_util.hpp"
#include "transport/shm/context.hpp"
#include "transport/tcp/connector.hpp"
#include "transport/tcp/context.hpp"
#include "transport/tcp/wire.hpp"

#include <sys/socket.h>
#include <sys/statvfs.h>
#include <thread>

namespace tandem::transport::test {
namespace {

using namespace std::chrono_literals;

struct ThrowingHandler final : PeerFailureHandler {
  void raise_peer_closed(int peer, std::string_view detail) override {
    TANDEM_THROW(ErrorCode::PeerLost, "rank {} closed: {}", peer, detail);
  }
};

bool dev_shm_has(const std::string& name) {
  return std::filesystem::exists("/dev/shm" + name);
}

// Drives both endpoints until every request is complete (or a bounded number of rounds).
void drive(Endpoint& a, Endpoint& b, std::initializer_list<Request*> rs) {
  for (int round = 0; round < 1'000'000; ++round) {
    bool done = true;
    for (Request* r : rs) done = done && r->complete;
    if (done) return;
    a.progress();
    b.progress();
  }
  FAIL() << "requests did not complete";
}

struct ShmPair {
  ThrowingHandler handler;
  std::unique_ptr<shm::Context> c0, c1;
  std::unique_ptr<Endpoint> e0, e1;  // e0: rank 0's endpoint to rank 1
  explicit ShmPair(std::size_t buffer) {
    const std::string run = unique_run_id("unit");
    c0 = std::make_unique<shm::Context>(0, std::vector<int>{1}, buffer, run);
    c1 = std::make_unique<shm::Context>(1, std::vector<int>{0}, buffer, run);
    c0->attach(1, c1->name());
    c1->attach(0, c0->name());
    e0 = c0->make_endpoint(1, handler);
    e1 = c1->make_endpoint(0, handler);
  }
};

TEST(ShmSegment, NamedAfterTheRunAndUnlinkedByItsLastMapper) {
  const std::string run = unique_run_id("seg");
  auto c0 = std::make_unique<shm::Context>(0, std::vector<int>{1, 2}, 64 << 10, run);
  EXPECT_EQ(c0->name().rfind("/tandem-" + run + "-", 0), 0u) << c0->name();
  EXPECT_TRUE(dev_shm_has(c0->name()));
  shm::Context c1(1, {0, 2}, 64 << 10, run);
  shm::Context c2(2, {0, 1}, 64 << 10, run);
  c1.attach(0, c0->name());
  EXPECT_TRUE(dev_shm_has(c0->name()));  // rank 2 still has to map it
  c2.attach(0, c0->name());
  EXPECT_FALSE(dev_shm_has(c0->name()));
  // A segment nobody mapped is removed by its creator.
  const std::string lonely = c1.name();
  c0.reset();
  EXPECT_TRUE(dev_shm_has(lonely));
  EXPECT_TRUE(shm_leftovers(run).size() == 2u);
}

TEST(ShmSegment, LeftoversOfAFailedSetupAreRemoved) {
  const std::string run = unique_run_id("gone");
  { shm::Context c(0, {1}, 64 << 10, run); }
  EXPECT_TRUE(shm_leftovers(run).empty());
}

TEST(ShmSegment, FullDevShmIsAnErrorThatSaysWhatToDo) {
  struct statvfs fs {};
  ASSERT_EQ(::statvfs("/dev/shm", &fs), 0);
  const std::uint64_t capacity = static_cast<std::uint64_t>(fs.f_blocks) * fs.f_frsize;
  if (capacity == 0 || capacity > (1ull << 40)) GTEST_SKIP() << "/dev/shm has no useful size limit";
  const std::string run = unique_run_id("full");
  const Error e = expect_error([&] { shm::Context c(0, {1}, 2 * capacity, run); });
  EXPECT_EQ(e.code(), ErrorCode::Io) << e.what();
  EXPECT_NE(e.message().find("--shm-size"), std::string::npos) << e.what();
  EXPECT_NE(e.message().find("TANDEM_SHM_DISABLE=1"), std::string::npos) << e.what();
  EXPECT_TRUE(shm_leftovers(run).empty());
}

TEST(ShmSegment, AttachingSomethingElseFailsClearly) {
  const std::string run = unique_run_id("bad");
  shm::Context c0(0, {1}, 64 << 10, run);
  shm::Context c1(1, {2}, 64 << 10, run);  // has no channel for rank 0
  EXPECT_EQ(expect_error([&] { c0.attach(1, c1.name()); }).code(), ErrorCode::Internal);
  EXPECT_EQ(expect_error([&] { c0.attach(1, "/tandem-does-not-exist"); }).code(), ErrorCode::Io);
}

TEST(ShmEndpoint, ChunksRingWrapAndInlineMessages) {
  ShmPair p(8 << 10);  // small slots: a 100 KiB message wraps the ring several times
  const auto g = shm::geometry_for(8 << 10);
  ASSERT_LT(g.slot_count * g.slot_bytes, 50u << 10);
  const std::size_t sizes[] = {0, 1, 40, 41, g.slot_bytes, g.slot_bytes + 1, 100 << 10, 3};
  for (std::size_t k = 0; k < std::size(sizes); ++k) {
    const auto out = make_payload(0, 1, k, sizes[k]);
    std::vector<std::uint8_t> in(sizes[k], 0);
    Request s = Request::make_send(1, k, out.data(), out.size());
    Request r = Request::make_recv(0, k, in.data(), in.size());
    p.e0->post(s);
    p.e1->post(r);
    drive(*p.e0, *p.e1, {&s, &r});
    EXPECT_EQ(first_bad(in, 0, 1, k), -1) << sizes[k];
  }
}

TEST(ShmEndpoint, SenderStopsWhenTheRingIsFull) {
  ShmPair p(8 << 10);
  const auto g = shm::geometry_for(8 << 10);
  std::vector<std::uint8_t> out(100 << 10, 5), in(100 << 10, 0);
  Request s = Request::make_send(1, 1, out.data(), out.size());
  p.e0->post(s);
  EXPECT_TRUE(p.e0->progress());
  EXPECT_FALSE(s.complete);
  EXPECT_EQ(s.done, g.slot_count * g.slot_bytes);  // exactly one ring
  EXPECT_FALSE(p.e0->progress());
  Request r = Request::make_recv(0, 1, in.data(), in.size());
  p.e1->post(r);
  drive(*p.e0, *p.e1, {&s, &r});
  EXPECT_EQ(in, out);
}

// A sender counts the sleeping peers it woke (the mesh then spins longer in its next wait,
// so that it does not sleep through the peer's wake-up): an awake peer is not counted.
TEST(ShmEndpoint, WakingASleepingPeerIsCounted) {
  ShmPair p(64 << 10);
  std::uint64_t k = 0;
  auto exchange = [&] {
    const std::uint64_t out = ++k;
    std::uint64_t in = 0;
    Request s = Request::make_send(1, static_cast<std::uint32_t>(k), &out, sizeof out);
    Request r = Request::make_recv(0, static_cast<std::uint32_t>(k), &in, sizeof in);
    p.e0->post(s);
    p.e1->post(r);
    drive(*p.e0, *p.e1, {&s, &r});
    EXPECT_EQ(in, out);
  };
  for (int i = 0; i < 10; ++i) exchange();
  EXPECT_EQ(p.c0->woken(), 0u);  // rank 1 never slept
  // Rank 1 sleeps on its doorbell in another thread; the main thread drives both endpoints
  // (the sleep touches neither) until a send finds rank 1 asleep and wakes it.
  std::thread sleeper([&] { p.c1->sleep(std::chrono::seconds(30), [] { return false; }); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (p.c0->woken() == 0 && std::chrono::steady_clock::now() < deadline) exchange();
  sleeper.join();  // woken: it returns long before its 30 s
  EXPECT_EQ(p.c0->woken(), 1u);
  EXPECT_EQ(p.c1->woken(), 0u);
}

TEST(ShmEndpoint, ReduceStraightFromTheSlots) {
  ShmPair p(8 << 10);
  std::vector<float> a(10000), b(10000), out(10000);
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i);
    b[i] = static_cast<float>(2 * i);
  }
  Request s = Request::make_send(1, 1, a.data(), a.size() * 4);
  Request r =
      Request::make_recv_reduce(0, 1, out.data(), b.data(), b.size(), DataType::f32, ReduceOp::sum);
  p.e0->post(s);
  p.e1->post(r);
  drive(*p.e0, *p.e1, {&s, &r});
  for (std::size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], 3.0f * i) << i;
}

TEST(ShmEndpoint, MismatchNamesBothSides) {
  ShmPair p(8 << 10);
  std::uint8_t x[16] = {}, y[32] = {};
  Request s = Request::make_send(1, 0x11, x, sizeof x);
  Request r = Request::make_recv(0, 0x11, y, sizeof y);
  p.e0->post(s);
  p.e1->post(r);
  p.e0->progress();
  const Error e = expect_error([&] { p.e1->progress(); });
  EXPECT_EQ(e.code(), ErrorCode::Mismatch);
  EXPECT_NE(e.message().find("rank 0 (shm)"), std::string::npos) << e.what();
  EXPECT_NE(e.message().find("32 bytes"), std::string::npos) << e.what();
  EXPECT_NE(e.message().find("16 bytes"), std::string::npos) << e.what();
}

// Mesh::transfer()'s step: a message of one chunk moves at once when nothing of its kind is
// queued with the peer; otherwise nothing moves and the request is left to be posted.
TEST(ShmEndpoint, CompleteNowMovesOneChunkBehindNothingQueued) {
  ShmPair p(8 << 10);
  const auto g = shm::geometry_for(8 << 10);
  for (const std::size_t n : {std::size_t{0}, std::size_t{8}, shm::kInlineBytes,
                              shm::kInlineBytes + 1, std::size_t{g.slot_bytes}}) {
    const auto out = make_payload(0, 1, n, n);
    std::vector<std::uint8_t> in(n, 0);
    Request r = Request::make_recv(0, 7, in.data(), n);
    EXPECT_FALSE(p.e1->complete_now(r)) << n << ": nothing was sent yet";
    EXPECT_EQ(r.done, 0u);
    Request s = Request::make_send(1, 7, out.data(), n);
    ASSERT_TRUE(p.e0->complete_now(s)) << n;
    EXPECT_TRUE(s.complete);
    ASSERT_TRUE(p.e1->complete_now(r)) << n;
    EXPECT_TRUE(r.complete);
    EXPECT_EQ(first_bad(in, 0, 1, n), -1) << n;
  }
  // More than one chunk: declined on both sides, and the message still moves when posted.
  const auto big = make_payload(0, 1, 99, g.slot_bytes + 1);
  std::vector<std::uint8_t> big_in(big.size(), 0);
  Request bs = Request::make_send(1, 9, big.data(), big.size());
  Request br = Request::make_recv(0, 9, big_in.data(), big_in.size());
  EXPECT_FALSE(p.e0->complete_now(bs));
  EXPECT_EQ(bs.done, 0u);
  // Behind a queued send or receive, a small one is declined: it must not overtake.
  p.e0->post(bs);
  p.e1->post(br);
  std::uint8_t x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8] = {};
  Request s = Request::make_send(1, 10, x, sizeof x);
  Request r = Request::make_recv(0, 10, y, sizeof y);
  EXPECT_FALSE(p.e0->complete_now(s));
  EXPECT_FALSE(p.e1->complete_now(r));
  p.e0->post(s);
  p.e1->post(r);
  drive(*p.e0, *p.e1, {&bs, &br, &s, &r});
  EXPECT_EQ(first_bad(big_in, 0, 1, 99), -1);
  EXPECT_EQ(std::memcmp(x, y, sizeof x), 0);
  // A full ring declines the next send until the receiver consumes.
  std::vector<Request> fill(g.slot_count);
  for (auto& f : fill) {
    f = Request::make_send(1, 11, x, sizeof x);
    ASSERT_TRUE(p.e0->complete_now(f));
  }
  Request over = Request::make_send(1, 11, x, sizeof x);
  EXPECT_FALSE(p.e0->complete_now(over));
  Request one = Request::make_recv(0, 11, y, sizeof y);
  ASSERT_TRUE(p.e1->complete_now(one));
  EXPECT_TRUE(p.e0->complete_now(over));
}

TEST(ShmEndpoint, CompleteNowFindsAMismatch) {
  ShmPair p(8 << 10);
  std::uint8_t x[16] = {}, y[32] = {};
  Request s = Request::make_send(1, 0x11, x, sizeof x);
  Request r = Request::make_recv(0, 0x11, y, sizeof y);
  ASSERT_TRUE(p.e0->complete_now(s));
  const Error e = expect_error([&] { p.e1->complete_now(r); });
  EXPECT_EQ(e.code(), ErrorCode::Mismatch);
  EXPECT_NE(e.message().find("32 bytes"), std::string::npos) << e.what();
}

// ---- tcp ---------------------------------------------------------------------------------

struct TcpPair {
  ThrowingHandler handler;
  std::unique_ptr<Endpoint> e0, e1;
  explicit TcpPair(int streams) {
    std::vector<net::Fd> a, b;
    for (int i = 0; i < streams; ++i) {
      int sv[2];
      EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
      a.emplace_back(sv[0]);
      b.emplace_back(sv[1]);
    }
    e0 = std::make_unique<tcp::Endpoint>(1, handler, std::move(a));
    e1 = std::make_unique<tcp::Endpoint>(0, handler, std::move(b));
  }
};

TEST(TcpEndpoint, StripedAndPlainMessagesInterleave) {
  TcpPair p(3);
  const std::size_t sizes[] = {5, 1 << 20, 0, (1 << 20) + 7, 100, tcp::kStripeMin, 3};
  std::vector<std::vector<std::uint8_t>> out, in;
  std::vector<Request> reqs;
  reqs.reserve(2 * std::size(sizes));
  for (std::size_t k = 0; k < std::size(sizes); ++k) {
    out.push_back(make_payload(0, 1, k, sizes[k]));
    in.emplace_back(sizes[k], 0);
  }
  for (std::size_t k = 0; k < std::size(sizes); ++k) {
    reqs.push_back(Request::make_send(1, k, out[k].data(), sizes[k]));
    reqs.push_back(Request::make_recv(0, k, in[k].data(), sizes[k]));
    p.e0->post(reqs[reqs.size() - 2]);
    p.e1->post(reqs.back());
  }
  for (int round = 0; round < 1'000'000 && !reqs.back().complete; ++round) {
    p.e0->progress();
    p.e1->progress();
  }
  for (std::size_t k = 0; k < std::size(sizes); ++k) {
    EXPECT_TRUE(reqs[2 * k].complete && reqs[2 * k + 1].complete) << k;
    EXPECT_EQ(first_bad(in[k], 0, 1, k), -1) << sizes[k];
  }
}

TEST(TcpEndpoint, ReduceKeepsPartialElementsAcrossReads) {
  TcpPair p(2);
  const std::size_t n = (1 << 19) + 3;  // doubles: striped, odd count
  std::vector<double> a(n), b(n), out(n);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = static_cast<double>(i % 1000);
    b[i] = 0.5;
  }
  Request s = Request::make_send(1, 1, a.data(), n * 8);
  Request r =
      Request::make_recv_reduce(0, 1, out.data(), b.data(), n, DataType::f64, ReduceOp::max);
  p.e0->post(s);
  p.e1->post(r);
  drive(*p.e0, *p.e1, {&s, &r});
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], std::max(a[i], 0.5)) << i;
}

TEST(TcpEndpoint, ClosedPeerIsReportedThroughTheHandler) {
  TcpPair p(1);
  std::uint8_t buf[8];
  Request r = Request::make_recv(0, 1, buf, sizeof buf);
  p.e1->post(r);
  p.e0.reset();  // closes rank 0's sockets
  const Error e = expect_error([&] { p.e1->progress(); });
  EXPECT_EQ(e.code(), ErrorCode::PeerLost);
  EXPECT_NE(e.message().find("end of file"), std::string::npos) << e.what();
}

TEST(TcpWire, StripesCoverTheMessageInAlignedParts) {
  for (std::uint64_t bytes : {std::uint64_t{0}, std::uint64_t{100}, tcp::kStripeMin,
                              tcp::kStripeMin + 1, std::uint64_t{(64u << 20) + 5}}) {
    for (int streams : {1, 2, 3, 8}) {
      std::uint64_t next = 0;
      for (int k = 0; k < streams; ++k) {
        const tcp::Part part = tcp::part_of(bytes, k, streams);
        if (part.size() == 0) continue;
        EXPECT_EQ(part.begin, next);
        EXPECT_EQ(part.begin % 64, 0u);
        next = part.end;
      }
      EXPECT_EQ(next, bytes) << bytes << " over " << streams;
    }
  }
}

TEST(TcpWire, HelloChecks) {
  const std::string good = tcp::encode_hello(0, 1, 4, 0, "secret");
  tcp::HelloHead h;
  std::memcpy(&h, good.data(), sizeof h);
  EXPECT_EQ(tcp::check_hello(h, "secret", 1, 4, "secret"), "");
  EXPECT_NE(tcp::check_hello(h, "secreT", 1, 4, "secret").find("wrong token"), std::string::npos);
  EXPECT_NE(tcp::check_hello(h, "secret", 2, 4, "secret"), "");  // addressed to another rank
  EXPECT_NE(tcp::check_hello(h, "secret", 1, 8, "secret"), "");  // another world size
  h.magic ^= 1;
  EXPECT_NE(tcp::check_hello(h, "secret", 1, 4, "secret"), "");
  EXPECT_TRUE(tcp::token_equal("", ""));
  EXPECT_FALSE(tcp::token_equal("a", ""));
  EXPECT_FALSE(tcp::token_equal("abc", "abd"));
}

TEST(TcpHandshake, StrangersAreTurnedAwayAndPeersConnect) {
  tcp::Context c0(0, 2, "127.0.0.1", "good-token");
  tcp::Context c1(1, 2, "127.0.0.1", "good-token");
  std::vector<tcp::Target> targets = {{"127.0.0.1", c0.port(), 2}, {"127.0.0.1", c1.port(), 2}};
  // Two strangers reach rank 1's listener first: one with the wrong token, one with junk.
  std::vector<net::Fd> strangers;
  for (const std::string& bytes :
       {tcp::encode_hello(0, 1, 2, 0, "bad-token"), std::string(64, 'x')}) {
    net::Fd fd = net::connect_tcp("127.0.0.1", c1.port(), deadline_in(5s));
    net::write_full(fd.get(), bytes.data(), bytes.size(), deadline_in(5s));
    strangers.push_back(std::move(fd));
  }
  // Each rank connects to the other as setup does (rank 0 dials); s<r>[peer] is its socket set.
  auto connect_to = [&](tcp::Context& c, int peer) {
    c.connector().set_target(peer, targets[static_cast<std::size_t>(peer)]);
    std::vector<tcp::PeerSockets> all(2);
    all[static_cast<std::size_t>(peer)] =
        std::move(c.connector().connect(std::vector<int>{peer}, deadline_in(20s), {})[0]);
    return all;
  };
  std::vector<tcp::PeerSockets> s0, s1;
  std::thread t1([&] { s1 = connect_to(c1, 0); });
  std::thread t0([&] { s0 = connect_to(c0, 1); });
  t0.join();
  t1.join();
  EXPECT_EQ(c1.rejected(), 2u);
  EXPECT_EQ(c0.rejected(), 0u);
  EXPECT_TRUE(s0[1].control.valid() && s1[0].control.valid());
  EXPECT_EQ(s0[1].data.size(), 2u);
  for (const auto& fd : s1[0].data) EXPECT_TRUE(fd.valid());
  // The strangers were disconnected without an answer (EOF, or a reset for unread junk).
  for (auto& fd : strangers) {
    char c;
    net::set_nonblocking(fd.get(), false);
    EXPECT_LE(::recv(fd.get(), &c, 1, 0), 0);
  }
}

}  // namespace
}  // namespace tandem::transport::test
