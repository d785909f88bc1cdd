// TcpStore client and server: authentication, limits, failures, and a server that must
// survive any bytes a client sends.

#include "core/net.hpp"
#include "store/protocol.hpp"
#include "store_test_util.hpp"
#include "support/scoped_env.hpp"

#include <tandem/error.hpp>
#include <tandem/store.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <poll.h>
#include <random>
#include <sys/resource.h>
#include <sys/socket.h>
#include <thread>

namespace tandem::store::test {
namespace {

using namespace std::chrono_literals;
namespace proto = store::proto;

constexpr const char* kToken = "s3cret-token";

TcpStoreServerOptions server_options() {
  TcpStoreServerOptions o;
  o.token = kToken;
  return o;
}

TcpStoreOptions client_options(std::string token = kToken) {
  TcpStoreOptions o;
  o.token = std::move(token);
  o.connect_timeout = 10s;
  o.timeout = 30s;
  return o;
}

net::Fd raw_connect(std::uint16_t port) {
  return net::connect_tcp("127.0.0.1", port, deadline_in(10s));
}

std::string hello_frame(std::string token = kToken) {
  proto::Message m;
  m.type = proto::Type::hello;
  m.number = proto::kVersion;
  m.value = std::move(token);
  return proto::encode(m);
}

// Sends bytes, ignoring a connection the server has already closed.
void send_all(int fd, const std::string& bytes) {
  try {
    net::write_full(fd, bytes.data(), bytes.size(), deadline_in(10s));
  } catch (const Error&) {
  }
}

// Reads until the server closes the connection (bounded). Returns the ERROR frame the
// server sent before closing, if it sent one.
std::optional<proto::Message> read_until_closed(int fd) {
  std::string got;
  const auto deadline = deadline_in(10s);
  char buf[4096];
  for (;;) {
    if (!net::poll_one(fd, POLLIN, deadline)) {
      ADD_FAILURE() << "the server did not close the connection within 10 s";
      return std::nullopt;
    }
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;  // EOF or reset: closed either way
    got.append(buf, static_cast<std::size_t>(n));
  }
  std::size_t off = 0;
  std::optional<proto::Message> error;
  while (off < got.size()) {
    auto res = proto::decode_frame(std::as_bytes(std::span(got)).subspan(off), proto::Limits{});
    if (res.status != proto::DecodeResult::Status::ok) break;
    if (res.message.type == proto::Type::error) error = res.message;
    off += res.consumed;
  }
  return error;
}

void expect_serves(const TcpStoreServer& server) {
  TcpStore good("127.0.0.1", server.port(), client_options());
  const auto n = good.add("health", 1);
  EXPECT_GE(n, 1);
  EXPECT_EQ(good.get("health"), std::to_string(n));
}

std::string header(std::uint32_t magic, std::uint8_t version, std::uint8_t type,
                   std::uint32_t len) {
  std::string h(proto::kHeaderBytes, '\0');
  std::memcpy(h.data(), &magic, 4);
  h[4] = static_cast<char>(version);
  h[5] = static_cast<char>(type);
  std::memcpy(h.data() + 8, &len, 4);
  return h;
}

std::string set_frame(const std::string& key, const std::string& value) {
  proto::Message m;
  m.type = proto::Type::set;
  m.keys = {key};
  m.value = value;
  return proto::encode(m);
}

TEST(TcpStore, WrongTokenIsUnauthenticated) {
  TcpStoreServer server(server_options());
  const auto msg = expect_error(ErrorCode::Unauthenticated, [&] {
    TcpStore bad("127.0.0.1", server.port(), client_options("wrong"));
  });
  EXPECT_TRUE(contains(msg, "authentication failed: wrong TANDEM_STORE_TOKEN")) << msg;
  EXPECT_TRUE(contains(msg, fmt::format("127.0.0.1:{}", server.port()))) << msg;
  EXPECT_EQ(server.rejected_count(), 1u);
  expect_serves(server);
}

// A client that disconnects (dies) has its registered keys set; one that cancels does not.
TEST(TcpStore, OnDisconnectSetsTheKeysOfAClosedConnection) {
  TcpStoreServer server(server_options());
  TcpStore watcher("127.0.0.1", server.port(), client_options());
  {
    TcpStore dying("127.0.0.1", server.port(), client_options());
    EXPECT_TRUE(dying.set_on_disconnect("lost", "rank 3 on hostb (pid 42)"));
    EXPECT_TRUE(dying.set_on_disconnect("also", "x"));
    EXPECT_TRUE(dying.set_on_disconnect("also", "y"));  // replaces
    EXPECT_TRUE(dying.set_on_disconnect("cancelled", "z"));
    EXPECT_TRUE(dying.set_on_disconnect("cancelled", ""));
    const std::string lost[] = {"lost"};
    EXPECT_FALSE(watcher.check(lost));
  }
  // A waiter is woken by the disconnect, not by a poll.
  EXPECT_EQ(watcher.get("lost", deadline_in(20s)), "rank 3 on hostb (pid 42)");
  EXPECT_EQ(watcher.get("also", deadline_in(20s)), "y");
  const std::string cancelled[] = {"cancelled"};
  EXPECT_FALSE(watcher.check(cancelled));
}

TEST(TcpStore, OnDisconnectIsBoundedPerConnection) {
  TcpStoreServer server(server_options());
  TcpStore client("127.0.0.1", server.port(), client_options());
  for (int i = 0; i < 64; ++i) client.set_on_disconnect(fmt::format("k{}", i), "v");
  const auto msg = expect_error(ErrorCode::InvalidArgument,
                                [&] { client.set_on_disconnect("one-too-many", "v"); });
  EXPECT_TRUE(contains(msg, "limit")) << msg;
  client.set("still", "usable");  // an error reply, not a closed connection
  EXPECT_EQ(client.get("still", deadline_in(10s)), "usable");
}

TEST(PrefixStore, OnDisconnectIsPrefixedAndOtherStoresDecline) {
  TcpStoreServer server(server_options());
  TcpStore watcher("127.0.0.1", server.port(), client_options());
  {
    auto base = std::make_shared<TcpStore>("127.0.0.1", server.port(), client_options());
    PrefixStore prefixed("job", base);
    EXPECT_TRUE(prefixed.set_on_disconnect("lost", "gone"));
  }
  EXPECT_EQ(watcher.get("job/lost", deadline_in(20s)), "gone");
  HashStore hash;
  EXPECT_FALSE(hash.set_on_disconnect("lost", "gone"));
}

// A rank reading every other rank's key at 5,000 ranks: two round trips (4,096 keys each at
// most), not 5,000.
TEST(TcpStore, MultiGetTakesOneRequestPer4096Keys) {
  TcpStoreServer server(server_options());
  TcpStore writer("127.0.0.1", server.port(), client_options());
  TcpStore reader("127.0.0.1", server.port(), client_options());
  std::vector<std::string> keys;
  for (int i = 0; i < 5000; ++i) {
    keys.push_back(fmt::format("addr/{}", i));
    writer.set(keys.back(), fmt::format("host-{}:{}", i, 20000 + i));
  }
  const std::uint64_t before = reader.requests();
  const auto values = reader.multi_get(keys, deadline_in(30s));
  EXPECT_EQ(reader.requests() - before, 2u);
  ASSERT_EQ(values.size(), keys.size());
  for (int i = 0; i < 5000; i += 997)
    EXPECT_EQ(values[static_cast<std::size_t>(i)], fmt::format("host-{}:{}", i, 20000 + i));
  EXPECT_EQ(values.back(), "host-4999:24999");
  // Through a PrefixStore the count is the base's.
  PrefixStore prefixed("job",
                       std::make_shared<TcpStore>("127.0.0.1", server.port(), client_options()));
  prefixed.set("k", "v");
  EXPECT_EQ(prefixed.requests(), 2u);  // HELLO and SET
}

// Ranks of a job waiting for every rank's address while one of them dies: each waits in one
// request, and the death (its connection's ON_DISCONNECT) ends every wait with its value.
TEST(TcpStore, MultiGetOrStopIsOneRequestThatADisconnectEnds) {
  TcpStoreServer server(server_options());
  constexpr int kWaiters = 32;
  std::vector<std::unique_ptr<TcpStore>> clients;
  for (int i = 0; i < kWaiters; ++i)
    clients.push_back(std::make_unique<TcpStore>("127.0.0.1", server.port(), client_options()));
  auto dying = std::make_unique<TcpStore>("127.0.0.1", server.port(), client_options());
  ASSERT_TRUE(dying->set_on_disconnect("job/lost", "rank 7 (pid 123)"));
  std::vector<KeysOrStop> got(kWaiters);
  std::vector<std::uint64_t> requests(kWaiters);
  std::vector<std::thread> threads;
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&, i] {
      auto& c = *clients[static_cast<std::size_t>(i)];
      c.set(fmt::format("job/addr/{}", i), "here");
      const std::uint64_t before = c.requests();
      got[static_cast<std::size_t>(i)] = c.multi_get_or_stop(
          std::vector<std::string>{fmt::format("job/addr/{}", (i + 1) % kWaiters), "job/addr/all"},
          "job/lost", deadline_in(60s), 10ms);
      requests[static_cast<std::size_t>(i)] = c.requests() - before;
    });
  }
  dying.reset();
  for (auto& t : threads) t.join();
  for (int i = 0; i < kWaiters; ++i) {
    EXPECT_EQ(got[static_cast<std::size_t>(i)].stop, std::optional<std::string>("rank 7 (pid 123)"))
        << "waiter " << i;
    EXPECT_EQ(requests[static_cast<std::size_t>(i)], 1u) << "waiter " << i;
  }
  // The stop key stays: a later wait ends at once; one with its keys there reads them.
  const std::vector<std::string> mine = {"job/addr/0"};
  EXPECT_EQ(clients[0]
                ->multi_get_or_stop(std::vector<std::string>{"job/addr/all"}, "job/lost",
                                    deadline_in(60s), 10ms)
                .stop,
            std::optional<std::string>("rank 7 (pid 123)"));
  EXPECT_EQ(clients[0]->multi_get_or_stop(mine, "job/lost", deadline_in(60s), 10ms).values,
            std::vector<std::string>{"here"});
}

// A wait that its keys completed leaves nothing behind on the server: a later write of its stop
// key sends that connection no second reply (the next call would read it as its own answer).
TEST(TcpStore, MultiGetOrStopCompletedByItsKeysLeavesNoStopBehind) {
  TcpStoreServer server(server_options());
  TcpStore reader("127.0.0.1", server.port(), client_options());
  TcpStore writer("127.0.0.1", server.port(), client_options());
  KeysOrStop got;
  std::thread t([&] {
    got = reader.multi_get_or_stop(std::vector<std::string>{"a", "b"}, "stop", deadline_in(60s),
                                   10ms);
  });
  writer.set("a", "1");
  writer.set("b", "2");
  t.join();
  EXPECT_EQ(got.values, (std::vector<std::string>{"1", "2"}));
  writer.set("stop", "late");
  EXPECT_EQ(reader.add("n", 5), 5);
  EXPECT_EQ(reader.get("b", deadline_in(60s)), "2");
}

// Many clients connected at once, as the ranks of a large job are: none loses a key or an add.
TEST(TcpStore, AThousandClientsAtOnceLoseNoKeys) {
  TcpStoreServer server(server_options());
  std::vector<std::unique_ptr<TcpStore>> clients;
  std::vector<std::string> keys;
  for (int i = 0; i < 1000; ++i) {
    clients.push_back(std::make_unique<TcpStore>("127.0.0.1", server.port(), client_options()));
    keys.push_back(fmt::format("rank/{}", i));
    clients.back()->set(keys.back(), std::to_string(i));
    clients.back()->add("joined", 1);
  }
  const auto values = clients.front()->multi_get(keys, deadline_in(30s));
  ASSERT_EQ(values.size(), keys.size());
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(values[static_cast<std::size_t>(i)], std::to_string(i));
  EXPECT_EQ(clients.back()->add("joined", 0), 1000);
}

TEST(TcpStore, TokenFromEnvironment) {
  TcpStoreServer server(server_options());
  {
    testing::ScopedEnv token("TANDEM_STORE_TOKEN", kToken);
    TcpStore from_env("127.0.0.1", server.port(), client_options(""));
    from_env.set("k", "v");
    EXPECT_EQ(from_env.get("k"), "v");
  }
  testing::ScopedEnv wrong("TANDEM_STORE_TOKEN", "not-it");
  expect_error(ErrorCode::Unauthenticated,
               [&] { TcpStore c("127.0.0.1", server.port(), client_options("")); });
}

TEST(TcpStore, ServerWithoutTokenAcceptsAnyClient) {
  TcpStoreServer server(TcpStoreServerOptions{});
  TcpStore c("127.0.0.1", server.port(), client_options("anything"));
  c.set("k", "v");
  EXPECT_EQ(c.get("k"), "v");
}

TEST(TcpStore, AdoptsAListeningSocket) {
  net::Fd fd = net::listen_tcp("127.0.0.1", 0);
  const auto port = net::bound_port(fd.get());
  TcpStoreServer server(fd.release(), server_options());
  EXPECT_EQ(server.port(), port);
  TcpStore c("127.0.0.1", port, client_options());
  EXPECT_EQ(c.add("x", 2), 2);
  EXPECT_EQ(server.connection_count(), 1u);
}

TEST(TcpStore, ValuesAtTheLimit) {
  auto so = server_options();
  so.max_value_bytes = 1 << 20;
  TcpStoreServer server(so);
  auto co = client_options();
  co.max_value_bytes = 1 << 20;
  TcpStore c("127.0.0.1", server.port(), co);
  const std::string exact(1 << 20, 'x');
  c.set("exact", exact);
  EXPECT_EQ(c.get("exact"), exact);
  c.compare_set("cas", "", exact);
  EXPECT_EQ(c.compare_set("cas", exact, exact), exact);
  expect_error(ErrorCode::InvalidArgument, [&] { c.set("over", std::string((1 << 20) + 1, 'x')); });
  EXPECT_EQ(c.get("exact").size(), exact.size());  // the connection is still good
  // A client that believes in a larger limit is refused by the server, and says why.
  auto big = client_options();
  big.max_value_bytes = 4 << 20;
  TcpStore optimist("127.0.0.1", server.port(), big);
  try {
    optimist.set("over", std::string(3 << 20, 'x'));
    ADD_FAILURE() << "the server accepted a value over its limit";
  } catch (const Error& e) {
    // The server refuses as soon as it sees the header; whether its ERROR frame reaches the
    // client before the reset depends on timing, so either report is right.
    if (e.code() == ErrorCode::Internal)
      EXPECT_TRUE(contains(e.message(), "exceeds the limit")) << e.what();
    else
      EXPECT_EQ(e.code(), ErrorCode::Io) << e.what();
  }
  EXPECT_EQ(server.rejected_count(), 1u);
  expect_serves(server);
}

TEST(TcpStore, ServerSideTimeoutNamesKeysAndAddress) {
  TcpStoreServer server(server_options());
  TcpStore c("127.0.0.1", server.port(), client_options());
  c.set("ready-0", "1");
  const std::vector<std::string> keys = {"ready-0", "ready-1"};
  const auto msg = expect_error(ErrorCode::Timeout, [&] { c.wait(keys, deadline_in(200ms)); });
  EXPECT_TRUE(contains(msg, "ready-1")) << msg;
  EXPECT_FALSE(contains(msg, "'ready-0'")) << msg;
  EXPECT_TRUE(contains(msg, fmt::format("127.0.0.1:{}", server.port()))) << msg;
  // The timeout was answered in-band: the same connection keeps working.
  c.set("ready-1", "1");
  c.wait(keys, deadline_in(5s));
}

TEST(TcpStore, ConnectToAClosedPortFailsByItsDeadline) {
  std::uint16_t port = 0;
  {
    net::Fd fd = net::listen_tcp("127.0.0.1", 0);
    port = net::bound_port(fd.get());
  }  // closed: nothing listens there now
  auto o = client_options();
  o.connect_timeout = 300ms;
  const auto start = Clock::now();
  try {
    TcpStore c("127.0.0.1", port, o);
    ADD_FAILURE() << "connected to a closed port";
  } catch (const Error& e) {
    EXPECT_TRUE(e.code() == ErrorCode::Io || e.code() == ErrorCode::Timeout) << e.what();
    EXPECT_TRUE(contains(e.message(), fmt::format("127.0.0.1:{}", port))) << e.what();
    EXPECT_TRUE(contains(e.message(), "MASTER_ADDR")) << e.what();
  }
  EXPECT_GE(Clock::now() - start, 300ms);
  EXPECT_LT(Clock::now() - start, 10s);
}

TEST(TcpStore, ClientRetriesUntilTheServerComesUp) {
  std::uint16_t port = 0;
  {
    net::Fd probe = net::listen_tcp("127.0.0.1", 0);
    port = net::bound_port(probe.get());
  }
  // The client may start before or after the server; either way it must end up connected.
  std::optional<Error> error;
  std::string got;
  std::thread client([&] {
    try {
      TcpStore c("127.0.0.1", port, client_options());
      got = c.get("k", deadline_in(10s));
    } catch (const Error& e) {
      error = e;
    }
  });
  auto o = server_options();
  o.port = port;
  TcpStoreServer server(o);
  TcpStore setter("127.0.0.1", port, client_options());
  setter.set("k", "v");
  client.join();
  EXPECT_FALSE(error.has_value()) << error->what();
  EXPECT_EQ(got, "v");
}

TEST(TcpStore, HelloWaitsForAServerStartedLateOnItsSocket) {
  net::Fd fd = net::listen_tcp("127.0.0.1", 0);
  const auto port = net::bound_port(fd.get());
  // The socket already listens, so the client's connect completes in the kernel; its HELLO
  // is answered once the server thread adopts the socket.
  std::optional<TcpStoreServer> server;
  std::thread starter([&] { server.emplace(fd.release(), server_options()); });
  TcpStore c("127.0.0.1", port, client_options());
  starter.join();
  c.set("k", "v");
  EXPECT_EQ(c.get("k"), "v");
}

TEST(TcpStore, ServerExitFailsAPendingWaitWithIo) {
  auto server = std::make_unique<TcpStoreServer>(server_options());
  TcpStore c("127.0.0.1", server->port(), client_options());
  std::optional<Error> error;
  std::thread waiter([&] {
    try {
      c.wait(std::vector<std::string>{"never"}, deadline_in(60s));
    } catch (const Error& e) {
      error = e;
    }
  });
  ASSERT_TRUE(eventually([&] { return server->connection_count() == 1; }));
  const auto start = Clock::now();
  server.reset();
  waiter.join();
  EXPECT_LT(Clock::now() - start, 10s);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), ErrorCode::Io) << error->what();
  EXPECT_TRUE(contains(error->message(), "closed the connection")) << error->what();
  // Later calls fail at once, naming the earlier error.
  const auto msg = expect_error(ErrorCode::Io, [&] { c.set("k", "v"); });
  EXPECT_TRUE(contains(msg, "unusable")) << msg;
}

TEST(TcpStore, AddressInUseNamesTheAddress) {
  TcpStoreServer first(server_options());
  auto o = server_options();
  o.port = first.port();
  const auto msg = expect_error(ErrorCode::Io, [&] { TcpStoreServer second(o); });
  EXPECT_TRUE(contains(msg, fmt::format("127.0.0.1:{}", first.port()))) << msg;
  EXPECT_TRUE(contains(msg, "in use")) << msg;
  EXPECT_TRUE(contains(msg, "MASTER_PORT")) << msg;
}

TEST(TcpStore, MaxConnections) {
  auto o = server_options();
  o.max_connections = 2;
  TcpStoreServer server(o);
  TcpStore a("127.0.0.1", server.port(), client_options());
  TcpStore b("127.0.0.1", server.port(), client_options());
  const auto msg = expect_error(ErrorCode::Io,
                                [&] { TcpStore c("127.0.0.1", server.port(), client_options()); });
  EXPECT_TRUE(contains(msg, "connections")) << msg;
  a.set("still", "fine");
  EXPECT_EQ(b.get("still"), "fine");
}

TEST(TcpStore, SilentConnectionIsClosedAfterTheHandshakeTimeout) {
  auto o = server_options();
  o.handshake_timeout = 200ms;
  TcpStoreServer server(o);
  net::Fd silent = raw_connect(server.port());
  const auto start = Clock::now();
  auto err = read_until_closed(silent.get());
  EXPECT_GE(Clock::now() - start, 150ms);
  ASSERT_TRUE(err.has_value());
  EXPECT_TRUE(contains(err->value, "HELLO")) << err->value;
  EXPECT_EQ(server.rejected_count(), 1u);
  expect_serves(server);
}

// Each malformed input closes that connection, increments rejected_count(), and leaves the
// server serving everyone else.
struct BadInput {
  const char* name;
  std::string bytes;
  bool hello_first;    // authenticate before sending `bytes`
  bool close_after;    // the client closes instead of waiting for the server to
  const char* reason;  // expected in the ERROR frame, when the server can send one
};

constexpr char kGarbage[] = "\x01\x02 this is not a frame \xff\xfe\0\0\0\0";

std::vector<BadInput> bad_inputs() {
  const std::string good_set = set_frame("k", "v");
  return {
      {"bad_magic", header(0x12345678, proto::kVersion, 2, 0), false, false, "magic"},
      {"bad_magic_after_hello", header(0x12345678, proto::kVersion, 2, 0), true, false, "magic"},
      {"bad_version", header(proto::kMagic, 9, 2, 0), true, false, "version"},
      {"unknown_type", header(proto::kMagic, proto::kVersion, 42, 0), true, false,
       "unknown frame type"},
      {"reply_type_as_request", header(proto::kMagic, proto::kVersion, 64, 0), true, false,
       "reply frame"},
      {"payload_len_max", header(proto::kMagic, proto::kVersion, 2, 0xffffffffu), true, false,
       "exceeds"},
      {"oversized_before_hello", header(proto::kMagic, proto::kVersion, 1, 1 << 20), false, false,
       "exceeds"},
      {"no_hello", good_set, false, false, "not HELLO"},
      {"wrong_token", hello_frame("guess"), false, false, "authentication failed"},
      {"second_hello", hello_frame(), true, false, "HELLO"},
      {"garbage", std::string(kGarbage, sizeof kGarbage - 1), false, false, "magic"},
      {"http", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", false, false, "magic"},
      {"trailing_bytes",
       header(proto::kMagic, proto::kVersion, 9, 10) + std::string("\x01\0\0\0pextra", 10), true,
       false, "trailing"},
      {"truncated_then_close", good_set.substr(0, good_set.size() - 3), true, true, nullptr},
      {"header_only_then_close", good_set.substr(0, 7), true, true, nullptr},
  };
}

TEST(TcpStoreServer, SurvivesMalformedInput) {
  TcpStoreServer server(server_options());
  std::size_t expected_rejects = 0;
  for (const auto& bad : bad_inputs()) {
    SCOPED_TRACE(bad.name);
    net::Fd fd = raw_connect(server.port());
    if (bad.hello_first) {
      send_all(fd.get(), hello_frame());
      std::byte ok[proto::kHeaderBytes];
      net::read_full(fd.get(), ok, sizeof ok, deadline_in(10s));
      EXPECT_EQ(proto::read_header(ok).type, static_cast<std::uint8_t>(proto::Type::ok));
    }
    send_all(fd.get(), bad.bytes);
    ++expected_rejects;
    if (bad.close_after) {
      fd.reset();
      ASSERT_TRUE(eventually([&] { return server.rejected_count() == expected_rejects; }))
          << "rejected_count " << server.rejected_count();
    } else {
      auto err = read_until_closed(fd.get());
      ASSERT_TRUE(err.has_value());
      EXPECT_TRUE(contains(err->value, bad.reason)) << err->value;
      EXPECT_EQ(server.rejected_count(), expected_rejects);
    }
    expect_serves(server);
  }
}

TEST(TcpStoreServer, FrameSplitIntoSingleByteWrites) {
  TcpStoreServer server(server_options());
  net::Fd fd = raw_connect(server.port());
  const std::string bytes = hello_frame() + set_frame("split", "value");
  for (char ch : bytes) send_all(fd.get(), std::string(1, ch));
  std::byte reply[2 * proto::kHeaderBytes];
  net::read_full(fd.get(), reply, sizeof reply, deadline_in(10s));
  EXPECT_EQ(proto::read_header(std::span(reply).first(12)).type,
            static_cast<std::uint8_t>(proto::Type::ok));
  EXPECT_EQ(proto::read_header(std::span(reply).subspan(12)).type,
            static_cast<std::uint8_t>(proto::Type::ok));
  TcpStore c("127.0.0.1", server.port(), client_options());
  EXPECT_EQ(c.get("split"), "value");
  EXPECT_EQ(server.rejected_count(), 0u);
}

TEST(TcpStoreServer, ClientThatNeverReadsDoesNotBlockOthers) {
  TcpStoreServer server(server_options());
  TcpStore c("127.0.0.1", server.port(), client_options());
  c.set("big", std::string(8 << 20, 'b'));
  net::Fd lazy = raw_connect(server.port());
  proto::Message get;
  get.type = proto::Type::get;
  get.keys = {"big"};
  get.number = 0;
  // Pipelined requests the client never reads replies for: the server answers one at a
  // time and stops reading this connection's requests while its reply is stuck.
  std::string burst = hello_frame();
  for (int i = 0; i < 8; ++i) burst += proto::encode(get);
  send_all(lazy.get(), burst);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(c.add("busy", 1), i + 1);
  expect_serves(server);
}

// Out of file descriptors, accept() fails; the server must pause accepting (not spin, not
// die) and pick the pending connection up once a descriptor is free again. Runs in a child
// process because it lowers the descriptor limit.
TEST(TcpStoreServer, RecoversFromRunningOutOfDescriptors) {
  Child child([] {
    rlimit lim{};
    ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &lim), 0);
    lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, 256);
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lim), 0);
    TcpStoreServer server(server_options());
    // Use up every descriptor but one, which the client socket takes.
    std::vector<net::Fd> hog;
    for (;;) {
      net::Fd fd(::dup(0));
      if (!fd) break;
      hog.push_back(std::move(fd));
    }
    ASSERT_GT(hog.size(), 2u);
    hog.pop_back();
    net::Fd client = raw_connect(server.port());  // completes in the kernel's backlog
    send_all(client.get(), hello_frame());
    // The server cannot accept now. Free a descriptor; the HELLO must then be answered.
    hog.pop_back();
    std::byte ok[proto::kHeaderBytes];
    net::read_full(client.get(), ok, sizeof ok, deadline_in(10s));
    EXPECT_EQ(proto::read_header(ok).type, static_cast<std::uint8_t>(proto::Type::ok));
    hog.clear();
    expect_serves(server);
  });
  EXPECT_EQ(child.join(), 0);
}

// A reply delivered to one waiter lets that connection run its next (pipelined) request,
// which completes another waiter: that second reply must go out at once, not at the next
// unrelated event.
TEST(TcpStoreServer, CascadedWakeUpsAreDeliveredPromptly) {
  TcpStoreServer server(server_options());
  auto authed = [&] {
    net::Fd fd = raw_connect(server.port());
    send_all(fd.get(), hello_frame());
    std::byte ok[proto::kHeaderBytes];
    net::read_full(fd.get(), ok, sizeof ok, deadline_in(10s));
    return fd;
  };
  // A: WAIT(k1) with SET(k2) queued behind it. B: GET(k2).
  net::Fd a = authed();
  net::Fd b = authed();
  proto::Message wait;
  wait.type = proto::Type::wait;
  wait.number = -1;
  wait.keys = {"k1"};
  send_all(a.get(), proto::encode(wait) + set_frame("k2", "from a"));
  proto::Message get;
  get.type = proto::Type::get;
  get.number = 30000;
  get.keys = {"k2"};
  send_all(b.get(), proto::encode(get));
  // A round trip on another connection: the server has read A's and B's requests by the
  // time it answers (they were readable in the same or an earlier epoll batch).
  TcpStore c("127.0.0.1", server.port(), client_options());
  EXPECT_FALSE(c.check(std::vector<std::string>{"k2"}));
  const auto start = Clock::now();
  c.set("k1", "go");
  std::byte reply[proto::kHeaderBytes + 4 + 6];
  net::read_full(b.get(), reply, sizeof reply, deadline_in(20s));
  EXPECT_EQ(proto::read_header(reply).type, static_cast<std::uint8_t>(proto::Type::value));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(reply) + 16, 6), "from a");
  EXPECT_LT(Clock::now() - start, 10s);
}

// A few thousand random and mutated frames, each on its own connection, some after a valid
// HELLO. Nothing may crash the server, and it must keep serving.
TEST(TcpStoreServer, RandomFramesDoNotCrashTheServer) {
  TcpStoreServer server(server_options());
  std::mt19937_64 rng(20240601);
  std::vector<std::string> valid;
  for (auto type :
       {proto::Type::set, proto::Type::get, proto::Type::add, proto::Type::compare_set,
        proto::Type::wait, proto::Type::check, proto::Type::delete_key, proto::Type::num_keys}) {
    proto::Message m;
    m.type = type;
    m.keys = {"fuzz-key", "k2"};
    m.value = "value";
    m.value2 = "other";
    m.number = 5;
    valid.push_back(proto::encode(m));
  }
  for (int iter = 0; iter < 3000; ++iter) {
    std::string f = valid[rng() % valid.size()];
    switch (rng() % 4) {
      case 0:
        f[rng() % f.size()] = static_cast<char>(rng());
        break;
      case 1:
        f.resize(rng() % f.size());
        break;
      case 2: {
        const std::uint32_t v = static_cast<std::uint32_t>(rng());
        std::memcpy(f.data() + (rng() % (f.size() - 3)), &v, 4);
        break;
      }
      default:
        f.assign(rng() % 80, '\0');
        for (auto& ch : f) ch = static_cast<char>(rng());
    }
    net::Fd fd = raw_connect(server.port());
    if (rng() % 2 == 0) f = hello_frame() + f;
    send_all(fd.get(), f);
    if (iter % 500 == 0) expect_serves(server);
  }
  expect_serves(server);
  EXPECT_GT(server.rejected_count(), 0u);
  EXPECT_TRUE(eventually([&] { return server.connection_count() == 0; }, 30s))
      << server.connection_count() << " connections still open";
}

}  // namespace
}  // namespace tandem::store::test
