// The socket helpers of src/core/net (tested here: the store is their first user).

#include "core/net.hpp"

#include "store_test_util.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace tandem::net {
namespace {

using namespace std::chrono_literals;
using store::test::contains;
using store::test::expect_error;

TEST(Net, ParseHostPort) {
  auto a = parse_host_port("example.org:29500");
  EXPECT_EQ(a.host, "example.org");
  EXPECT_EQ(a.port, 29500);
  auto b = parse_host_port("10.0.0.1:1");
  EXPECT_EQ(b.host, "10.0.0.1");
  EXPECT_EQ(b.port, 1);
  auto c = parse_host_port("[::1]:65535");
  EXPECT_EQ(c.host, "::1");
  EXPECT_EQ(c.port, 65535);
  auto d = parse_host_port("node7", 1234);
  EXPECT_EQ(d.host, "node7");
  EXPECT_EQ(d.port, 1234);
  auto e = parse_host_port("fe80::1", 99);
  EXPECT_EQ(e.host, "fe80::1");
  EXPECT_EQ(e.port, 99);
  auto f = parse_host_port("[::1]", 7);
  EXPECT_EQ(f.port, 7);
  for (const char* bad :
       {"host", "host:", ":80", "host:0", "host:65536", "host:12ab", "[::1", "[::1]x80", "[]:80"}) {
    const auto msg = expect_error(ErrorCode::InvalidArgument, [&] { parse_host_port(bad); });
    EXPECT_TRUE(contains(msg, bad)) << msg;
  }
  EXPECT_EQ(parse_port("0", true), std::optional<std::uint16_t>(0));
  EXPECT_EQ(parse_port("0"), std::nullopt);
  EXPECT_EQ(parse_port("-1"), std::nullopt);
}

TEST(Net, FormatHostPort) {
  EXPECT_EQ(format_host_port("::1", 80), "[::1]:80");
  EXPECT_EQ(format_host_port("h", 80), "h:80");
}

TEST(Net, ResolveLoopbackAndFailure) {
  auto addrs = resolve("127.0.0.1", 80);
  ASSERT_FALSE(addrs.empty());
  EXPECT_EQ(addrs[0].str(), "127.0.0.1:80");
  const auto msg = expect_error(ErrorCode::Io, [] { resolve("no-such-host.invalid", 80); });
  EXPECT_TRUE(contains(msg, "no-such-host.invalid")) << msg;
}

TEST(Net, ListenConnectAndAddresses) {
  Fd listener = listen_tcp("127.0.0.1", 0);
  const auto port = bound_port(listener.get());
  EXPECT_GT(port, 0);
  Fd client = connect_tcp("127.0.0.1", port, deadline_in(10s));
  Fd server(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  ASSERT_TRUE(server.valid());
  EXPECT_EQ(peer_address(server.get()), local_address(client.get()));
  EXPECT_EQ(peer_address(client.get()), fmt::format("127.0.0.1:{}", port));
  EXPECT_EQ(peer_address(-1), "<unknown address>");
  EXPECT_FALSE(local_host_name().empty());
  set_buffer_sizes(client.get(), 1 << 20, 1 << 20);
  set_keepalive(client.get());
  set_nodelay(client.get(), false);
}

TEST(Net, AddressInUse) {
  Fd first = listen_tcp("127.0.0.1", 0);
  const auto port = bound_port(first.get());
  const auto msg = expect_error(ErrorCode::Io, [&] { listen_tcp("127.0.0.1", port); });
  EXPECT_TRUE(contains(msg, fmt::format("127.0.0.1:{}", port))) << msg;
  EXPECT_TRUE(contains(msg, fmt::format("ss -ltnp 'sport = :{}'", port))) << msg;
}

TEST(Net, ConnectToClosedPortFailsByTheDeadline) {
  std::uint16_t port = 0;
  {
    Fd probe = listen_tcp("127.0.0.1", 0);
    port = bound_port(probe.get());
  }
  const auto start = Clock::now();
  try {
    connect_tcp("127.0.0.1", port, deadline_in(250ms));
    ADD_FAILURE() << "connected to a closed port";
  } catch (const Error& e) {
    EXPECT_TRUE(e.code() == ErrorCode::Io || e.code() == ErrorCode::Timeout) << e.what();
    EXPECT_TRUE(contains(e.message(), fmt::format("127.0.0.1:{}", port))) << e.what();
    EXPECT_TRUE(contains(e.message(), "refused")) << e.what();
  }
  const auto took = Clock::now() - start;
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 10s);
}

class SocketPair : public ::testing::Test {
 protected:
  void SetUp() override {
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    a_.reset(fds[0]);
    b_.reset(fds[1]);
  }
  Fd a_, b_;
};

TEST_F(SocketPair, ReadWriteFullAcrossThreads) {
  std::string out(3 << 20, '\0');
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>(i * 7);
  std::thread writer([&] { write_full(a_.get(), out.data(), out.size(), deadline_in(30s)); });
  std::string in(out.size(), '\0');
  read_full(b_.get(), in.data(), in.size(), deadline_in(30s));
  writer.join();
  EXPECT_EQ(in, out);
}

TEST_F(SocketPair, ReadTimesOut) {
  char buf[4];
  const auto start = Clock::now();
  expect_error(ErrorCode::Timeout,
               [&] { read_full(b_.get(), buf, sizeof buf, deadline_in(100ms)); });
  EXPECT_GE(Clock::now() - start, 100ms);
}

TEST_F(SocketPair, EofIsConnectionClosed) {
  write_full(a_.get(), "ab", 2, deadline_in(1s));
  a_.reset();
  char buf[4];
  try {
    read_full(b_.get(), buf, sizeof buf, deadline_in(10s));
    ADD_FAILURE() << "read past EOF";
  } catch (const ConnectionClosed& e) {
    EXPECT_EQ(e.code(), ErrorCode::PeerLost);
    EXPECT_TRUE(contains(e.message(), "2 of 4")) << e.what();
  }
}

TEST_F(SocketPair, WriteToClosedPeerIsConnectionClosedNotSigpipe) {
  b_.reset();
  std::string big(1 << 20, 'x');
  EXPECT_THROW(write_full(a_.get(), big.data(), big.size(), deadline_in(10s)), ConnectionClosed);
}

TEST_F(SocketPair, WriteTimesOutWhenThePeerDoesNotRead) {
  std::string big(64 << 20, 'x');
  expect_error(ErrorCode::Timeout,
               [&] { write_full(a_.get(), big.data(), big.size(), deadline_in(200ms)); });
}

TEST(Net, PipesWork) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  Fd r(fds[0]), w(fds[1]);
  write_full(w.get(), "hello", 5, deadline_in(1s));
  char buf[5];
  read_full(r.get(), buf, 5, deadline_in(1s));
  EXPECT_EQ(std::string(buf, 5), "hello");
  expect_error(ErrorCode::Timeout, [&] { read_full(r.get(), buf, 1, deadline_in(50ms)); });
}

TEST(Net, PollTimeout) {
  EXPECT_EQ(poll_timeout_ms(Deadline::max()), -1);
  EXPECT_EQ(poll_timeout_ms(Clock::now() - 1s), 0);
  const int ms = poll_timeout_ms(deadline_in(1500us));
  EXPECT_GE(ms, 1);
  EXPECT_LE(ms, 2);
}

TEST(Net, FdIsMoveOnlyAndCloses) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  {
    Fd a(fds[0]);
    Fd b(std::move(a));
    EXPECT_FALSE(a.valid());
    EXPECT_EQ(b.get(), fds[0]);
  }
  EXPECT_EQ(::fcntl(fds[0], F_GETFD), -1);  // closed
  ::close(fds[1]);
}

}  // namespace
}  // namespace tandem::net
