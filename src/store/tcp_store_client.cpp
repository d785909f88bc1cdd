#include "core/net.hpp"
#include "store/common.hpp"
#include "store/protocol.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>
#include <tandem/settings.hpp>
#include <tandem/store.hpp>

#include <atomic>
#include <mutex>

namespace tandem::store {
namespace {

// How long past its own deadline a client waits for the server's TIMEOUT reply before it
// concludes that the server is stuck (a server that died closes the connection at once). On a
// host whose CPUs hundreds of ranks share, the server's thread may not run for seconds
// (docs/scale.md).
constexpr auto kReplyMargin = std::chrono::seconds(30);

// How long bytes sent to the server (or keepalive probes) may go unacknowledged before the
// connection fails: a cut link or a vanished host. The kernel acknowledges what a busy server
// has not read yet; only a large request to a server starved of CPU (its window shut) waits
// on the server, so this is longer than the control connections' 10 s. It also bounds the
// keepalive probes of an idle connection: as long as their default count takes (10 s idle,
// then 3 probes 5 s apart).
constexpr int kLinkSilence = 25;

std::int64_t timeout_ms(Deadline deadline) {
  if (deadline == Deadline::max()) return -1;
  const auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  return std::chrono::ceil<std::chrono::milliseconds>(left).count();
}

Deadline plus_margin(Deadline d) {
  return d >= Deadline::max() - kReplyMargin ? Deadline::max() : d + kReplyMargin;
}

proto::Message request(proto::Type t) {
  proto::Message m;
  m.type = t;
  return m;
}

}  // namespace

struct TcpStore::Impl {
  const Store* owner = nullptr;  // for its current default timeout
  std::string host;
  std::uint16_t port = 0;
  TcpStoreOptions options;
  std::string where;  // "host:port"
  proto::Limits limits;
  std::mutex mu;
  std::atomic<std::uint64_t> requests{0};
  net::Fd fd;
  std::string broken;  // why the connection is unusable; empty while it is fine

  [[noreturn]] void fail(ErrorCode code, const std::string& text) {
    broken = text;
    fd.reset();
    throw Error(code, text, __FILE__, __LINE__);
  }

  void check_size(const proto::Message& m) const {
    std::size_t payload = m.value.size() + m.value2.size() + 64;
    for (const auto& k : m.keys) payload += k.size() + 4;
    if (m.value.size() > limits.max_value_bytes || m.value2.size() > limits.max_value_bytes ||
        payload > limits.max_payload())
      TANDEM_THROW(ErrorCode::InvalidArgument,
                   "store value of {} bytes exceeds the limit of {} bytes (max_value_bytes); the "
                   "store carries addresses and handles, not data",
                   std::max(m.value.size(), m.value2.size()), limits.max_value_bytes);
  }

  // Sends one request and reads its reply. The lock is held by the caller. A transport
  // failure leaves the stream in an unknown state, so the connection is retired.
  proto::Message exchange(const proto::Message& req, Deadline reply_deadline) {
    requests.fetch_add(1, std::memory_order_relaxed);
    if (!broken.empty())
      TANDEM_THROW(ErrorCode::Io,
                   "the connection to the store at {} is unusable after an earlier error: {}",
                   where, broken);
    const std::string op = proto::type_name(static_cast<std::uint8_t>(req.type));
    const std::string bytes = proto::encode(req);
    try {
      net::write_full(fd.get(), bytes.data(), bytes.size(), op_deadline());
      std::byte header[proto::kHeaderBytes];
      net::read_full(fd.get(), header, sizeof header, reply_deadline);
      const auto h = proto::read_header(header);
      if (auto why = proto::validate_header(h, limits))
        fail(ErrorCode::Io,
             fmt::format("bad reply to {} from the store at {}: {}", op, where, *why));
      std::string payload(h.payload_len, '\0');
      net::read_full(fd.get(), payload.data(), payload.size(), reply_deadline);
      proto::Message reply;
      if (auto why =
              proto::decode_payload(h.type, std::as_bytes(std::span(payload)), limits, &reply))
        fail(ErrorCode::Io,
             fmt::format("bad reply to {} from the store at {}: {}", op, where, *why));
      return reply;
    } catch (const net::ConnectionClosed&) {
      fail(ErrorCode::Io,
           fmt::format("store at {} closed the connection during {} (the launcher or rank 0 "
                       "hosting the store exited?)",
                       where, op));
    } catch (const Error& e) {
      if (!broken.empty()) throw;
      if (e.code() == ErrorCode::Timeout)
        fail(ErrorCode::Timeout,
             fmt::format("store at {} did not answer {} in time ({}); is the store "
                         "process overloaded or stopped?",
                         where, op, e.message()));
      fail(e.code(), fmt::format("store at {}: {} failed: {}", where, op, e.message()));
    }
  }

  // exchange() plus the replies every call handles alike.
  proto::Message call(const proto::Message& req, Deadline reply_deadline, proto::Type expect,
                      std::string_view what) {
    check_size(req);
    std::lock_guard lock(mu);
    proto::Message reply = exchange(req, reply_deadline);
    if (reply.type == proto::Type::error) {
      const auto code =
          reply.number >= 0 && reply.number <= static_cast<std::int64_t>(ErrorCode::Internal)
              ? static_cast<ErrorCode>(reply.number)
              : ErrorCode::Internal;
      std::string text = fmt::format("store at {}: {}", where, reply.value);
      if (code == ErrorCode::InvalidArgument) throw Error(code, text, __FILE__, __LINE__);
      fail(code, text);  // the server closes the connection after any other error
    }
    if (reply.type == expect) return reply;
    if (reply.type == proto::Type::timeout &&
        (req.type == proto::Type::get || req.type == proto::Type::wait ||
         req.type == proto::Type::multi_get || req.type == proto::Type::multi_get_or_stop))
      return reply;
    if (reply.type == proto::Type::value && req.type == proto::Type::multi_get_or_stop)
      return reply;  // the stop key's value
    fail(ErrorCode::Io,
         fmt::format("store at {} answered {} with {} (expected {}): protocol error", where, what,
                     proto::type_name(static_cast<std::uint8_t>(reply.type)),
                     proto::type_name(static_cast<std::uint8_t>(expect))));
  }

  Deadline op_deadline() const { return deadline_after_ms(owner->timeout().count()); }

  void connect() {
    const auto deadline = deadline_after_ms(options.connect_timeout.count());
    fd = net::connect_tcp(host, port, deadline);
    net::set_keepalive(fd.get());
    net::set_user_timeout(fd.get(), kLinkSilence);
    std::string token =
        options.token.empty() ? settings::get_string("TANDEM_STORE_TOKEN") : options.token;
    TANDEM_CHECK_ARG(token.size() <= proto::kMaxTokenBytes, "store token is {} bytes; at most {}",
                     token.size(), proto::kMaxTokenBytes);
    auto hello = request(proto::Type::hello);
    hello.number = proto::kVersion;
    hello.value = std::move(token);
    std::lock_guard lock(mu);
    auto reply = exchange(hello, plus_margin(deadline));
    if (reply.type == proto::Type::error) {
      if (reply.number == static_cast<std::int64_t>(ErrorCode::Unauthenticated))
        fail(ErrorCode::Unauthenticated,
             fmt::format("store at {}: {} (every rank and the launcher must use the same token)",
                         where, reply.value));
      fail(ErrorCode::Io,
           fmt::format("store at {} refused the connection: {}", where, reply.value));
    }
    if (reply.type != proto::Type::ok)
      fail(ErrorCode::Io, fmt::format("store at {} answered HELLO with {}: protocol error", where,
                                      proto::type_name(static_cast<std::uint8_t>(reply.type))));
    TANDEM_DETAIL(store, "connected to the store at {}", where);
  }
};

TcpStore::TcpStore(std::string host, std::uint16_t port, TcpStoreOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->owner = this;
  impl_->host = std::move(host);
  impl_->port = port;
  impl_->options = std::move(options);
  impl_->where = net::format_host_port(impl_->host, port);
  impl_->limits.max_value_bytes = impl_->options.max_value_bytes;
  impl_->limits.max_key_bytes = kMaxKeyBytes;
  impl_->limits.max_keys = kMaxKeysPerCall;
  set_timeout(impl_->options.timeout);
  impl_->connect();
}

TcpStore::~TcpStore() = default;

const std::string& TcpStore::host() const noexcept {
  return impl_->host;
}
std::uint16_t TcpStore::port() const noexcept {
  return impl_->port;
}

void TcpStore::set(std::string_view key, std::string_view value) {
  check_key(key);
  auto m = request(proto::Type::set);
  m.keys.emplace_back(key);
  m.value = value;
  impl_->call(m, impl_->op_deadline(), proto::Type::ok, "SET");
}

std::string TcpStore::get(std::string_view key, Deadline deadline) {
  check_key(key);
  const auto start = Clock::now();
  auto m = request(proto::Type::get);
  m.keys.emplace_back(key);
  m.number = timeout_ms(deadline);
  auto reply = impl_->call(m, plus_margin(deadline), proto::Type::value, "GET");
  if (reply.type == proto::Type::timeout)
    throw_wait_timeout(fmt::format("store at {}: get", impl_->where), reply.keys,
                       Clock::now() - start);
  return std::move(reply.value);
}

std::int64_t TcpStore::add(std::string_view key, std::int64_t delta) {
  check_key(key);
  auto m = request(proto::Type::add);
  m.keys.emplace_back(key);
  m.number = delta;
  return impl_->call(m, impl_->op_deadline(), proto::Type::integer, "ADD").number;
}

std::string TcpStore::compare_set(std::string_view key, std::string_view expected,
                                  std::string_view desired) {
  check_key(key);
  auto m = request(proto::Type::compare_set);
  m.keys.emplace_back(key);
  m.value = expected;
  m.value2 = desired;
  return std::move(impl_->call(m, impl_->op_deadline(), proto::Type::value, "COMPARE_SET").value);
}

void TcpStore::wait(std::span<const std::string> keys, Deadline deadline) {
  check_key_count(keys.size());
  for (const auto& k : keys) check_key(k);
  const auto start = Clock::now();
  auto m = request(proto::Type::wait);
  m.keys.assign(keys.begin(), keys.end());
  m.number = timeout_ms(deadline);
  auto reply = impl_->call(m, plus_margin(deadline), proto::Type::ok, "WAIT");
  if (reply.type == proto::Type::timeout)
    throw_wait_timeout(fmt::format("store at {}: wait", impl_->where), reply.keys,
                       Clock::now() - start);
}

std::vector<std::string> TcpStore::multi_get(std::span<const std::string> keys, Deadline deadline) {
  return std::move(multi_get_or_stop(keys, {}, deadline, {}).values);
}

KeysOrStop TcpStore::multi_get_or_stop(std::span<const std::string> keys, std::string_view stop_key,
                                       Deadline deadline, std::chrono::milliseconds /*poll*/) {
  for (const auto& k : keys) check_key(k);
  check_key(stop_key);
  const bool stops = !stop_key.empty();
  const char* name = stops ? "MULTI_GET_OR_STOP" : "MULTI_GET";
  const auto start = Clock::now();
  KeysOrStop out;
  out.values.reserve(keys.size());
  // One round trip per kMaxKeys keys (the server's limit on a key list).
  for (std::size_t first = 0; first < keys.size(); first += proto::Limits{}.max_keys) {
    const auto part = keys.subspan(first, std::min(proto::Limits{}.max_keys, keys.size() - first));
    auto m = request(stops ? proto::Type::multi_get_or_stop : proto::Type::multi_get);
    m.keys.assign(part.begin(), part.end());
    m.value = stop_key;
    m.number = timeout_ms(deadline);
    auto reply = impl_->call(m, plus_margin(deadline), proto::Type::values, name);
    if (reply.type == proto::Type::timeout)
      throw_wait_timeout(
          fmt::format("store at {}: {}", impl_->where, stops ? "multi_get_or_stop" : "multi_get"),
          reply.keys, Clock::now() - start);
    if (reply.type == proto::Type::value) {
      out.values.clear();
      out.stop = std::move(reply.value);
      return out;
    }
    if (reply.keys.size() != part.size())
      impl_->fail(ErrorCode::Io, fmt::format("store at {} answered {} of {} keys with {} "
                                             "values: protocol error",
                                             impl_->where, name, part.size(), reply.keys.size()));
    for (auto& v : reply.keys) out.values.push_back(std::move(v));
  }
  return out;
}

std::uint64_t TcpStore::requests() const noexcept {
  return impl_->requests.load(std::memory_order_relaxed);
}

bool TcpStore::check(std::span<const std::string> keys) {
  check_key_count(keys.size());
  for (const auto& k : keys) check_key(k);
  auto m = request(proto::Type::check);
  m.keys.assign(keys.begin(), keys.end());
  return impl_->call(m, impl_->op_deadline(), proto::Type::boolean, "CHECK").number != 0;
}

bool TcpStore::delete_key(std::string_view key) {
  check_key(key);
  auto m = request(proto::Type::delete_key);
  m.keys.emplace_back(key);
  return impl_->call(m, impl_->op_deadline(), proto::Type::boolean, "DELETE").number != 0;
}

std::int64_t TcpStore::num_keys() {
  return num_keys_with_prefix({});
}

std::int64_t TcpStore::num_keys_with_prefix(std::string_view prefix) {
  check_key(prefix);
  auto m = request(proto::Type::num_keys);
  m.value = prefix;
  return impl_->call(m, impl_->op_deadline(), proto::Type::integer, "NUM_KEYS").number;
}

bool TcpStore::set_on_disconnect(std::string_view key, std::string_view value) {
  check_key(key);
  auto m = request(proto::Type::on_disconnect);
  m.keys.emplace_back(key);
  m.value = value;
  impl_->call(m, impl_->op_deadline(), proto::Type::ok, "ON_DISCONNECT");
  return true;
}

}  // namespace tandem::store
