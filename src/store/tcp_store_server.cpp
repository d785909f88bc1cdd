#include "core/net.hpp"
#include "store/common.hpp"
#include "store/kv_state.hpp"
#include "store/protocol.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>
#include <tandem/store.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <thread>
#include <time.h>
#include <unistd.h>

namespace tandem::store {
namespace {

constexpr std::uint64_t kStopId = 0;
constexpr std::uint64_t kListenId = 1;
constexpr std::size_t kReadChunk = std::size_t{64} << 10;
constexpr std::size_t kMaxReadStep = 1 << 20;  // buffers grow with bytes received, not claimed
constexpr auto kAcceptPause = std::chrono::milliseconds(100);

struct Conn {
  net::Fd fd;
  std::string peer;
  std::string in;   // received, not yet decoded
  std::string out;  // encoded replies not yet sent
  std::size_t out_off = 0;
  bool authed = false;
  bool waiting = false;   // a GET/WAIT is pending in the KvState
  bool want_out = false;  // EPOLLOUT registered
  Deadline handshake_deadline = Deadline::max();
};

// Rejections can come in floods (a port scanner, a job with the wrong token): log the
// first few of every minute and count the rest into the next line that is logged.
class WarnBudget {
 public:
  // The note to append to this warning, or nullopt when it should be skipped.
  std::optional<std::string> take() {
    const auto now = Clock::now();
    if (now - window_start_ >= std::chrono::minutes(1)) {
      window_start_ = now;
      used_ = 0;
    }
    if (used_ >= kPerMinute) {
      ++suppressed_;
      return std::nullopt;
    }
    ++used_;
    if (suppressed_ == 0) return std::string();
    auto note = fmt::format(" ({} similar warnings suppressed)", suppressed_);
    suppressed_ = 0;
    return note;
  }

 private:
  static constexpr int kPerMinute = 20;
  Clock::time_point window_start_ = Clock::now();
  int used_ = 0;
  std::size_t suppressed_ = 0;
};

}  // namespace

struct TcpStoreServer::Impl {
  TcpStoreServerOptions options;
  proto::Limits limits;        // after HELLO
  proto::Limits hello_limits;  // before: nothing larger than a HELLO is buffered
  net::Fd listen_fd;
  net::Fd epoll_fd;
  net::Fd stop_fd;
  std::uint16_t port = 0;
  std::atomic<std::size_t> connections{0};
  std::atomic<std::size_t> rejected{0};

  // Owned by the server thread from here on.
  std::uint64_t requests = 0;  // frames handled, HELLOs included
  std::uint64_t accepted = 0;  // connections accepted
  std::map<std::uint64_t, Conn> conns;
  std::uint64_t next_id = 2;
  KvState state;
  Deadline accept_resume = Deadline::max();
  std::set<std::pair<Deadline, std::uint64_t>> handshakes;
  WarnBudget warn_budget;
  std::thread thread;

  Impl(net::Fd listening, TcpStoreServerOptions opts)
      : options(std::move(opts)), listen_fd(std::move(listening)) {
    limits.max_value_bytes = options.max_value_bytes;
    limits.max_key_bytes = kMaxKeyBytes;
    limits.max_keys = kMaxKeysPerCall;
    hello_limits.max_value_bytes = proto::kMaxTokenBytes;
    hello_limits.max_key_bytes = proto::kMaxTokenBytes;
    hello_limits.max_keys = 1;
    net::set_nonblocking(listen_fd.get());
    port = net::bound_port(listen_fd.get());
    epoll_fd.reset(::epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_fd)
      TANDEM_THROW(ErrorCode::Io, "store server: epoll_create1 failed: {}",
                   net::errno_string(errno));
    stop_fd.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!stop_fd)
      TANDEM_THROW(ErrorCode::Io, "store server: eventfd failed: {}", net::errno_string(errno));
    ctl(EPOLL_CTL_ADD, stop_fd.get(), EPOLLIN, kStopId);
    ctl(EPOLL_CTL_ADD, listen_fd.get(), EPOLLIN, kListenId);
    thread = std::thread([this] { run(); });
    TANDEM_INFO(store, "store server listening on {} (port {}, {})",
                net::local_address(listen_fd.get()), port,
                options.token.empty() ? "no token" : "token required");
  }

  ~Impl() {
    const std::uint64_t one = 1;
    // If this write failed the thread could not be told to stop; eventfd writes of 1 cannot fail.
    [[maybe_unused]] const auto n = ::write(stop_fd.get(), &one, sizeof one);
    if (thread.joinable()) thread.join();
  }

  void ctl(int op, int fd, std::uint32_t events, std::uint64_t id) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = id;
    if (::epoll_ctl(epoll_fd.get(), op, fd, &ev) != 0)
      TANDEM_THROW(ErrorCode::Io, "store server: epoll_ctl on fd {} failed: {}", fd,
                   net::errno_string(errno));
  }

  void run() {
    try {
      loop();
    } catch (const std::exception& e) {
      TANDEM_WARN(store, "store server on port {} stopped: {}", port, e.what());
      listen_fd.reset();  // new clients are refused at once instead of waiting for a HELLO reply
    }
    timespec cpu{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
    const double cpu_ms =
        static_cast<double>(cpu.tv_sec) * 1e3 + static_cast<double>(cpu.tv_nsec) / 1e6;
    TANDEM_INFO(store,
                "store server on port {}: {} requests from {} connections; its thread used {:.1f} "
                "ms of CPU ({:.1f} us per request)",
                port, requests, accepted, cpu_ms,
                requests == 0 ? 0.0 : cpu_ms * 1e3 / static_cast<double>(requests));
    conns.clear();
    connections = 0;
  }

  // Runs one connection's work; a failure there (a full epoll set, memory for a huge value)
  // closes that connection only.
  template <class Fn>
  void guarded(std::uint64_t id, Fn&& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      auto it = conns.find(id);
      TANDEM_WARN(store, "store server on port {}: closing connection from {}: {}", port,
                  it == conns.end() ? std::string("?") : it->second.peer, e.what());
      close_conn(id);
    }
  }

  Deadline next_timer() const {
    Deadline t = accept_resume;
    if (auto d = state.next_deadline()) t = std::min(t, *d);
    if (!handshakes.empty()) t = std::min(t, handshakes.begin()->first);
    return t;
  }

  void loop() {
    epoll_event events[64];
    for (;;) {
      const int n = ::epoll_wait(epoll_fd.get(), events, 64, net::poll_timeout_ms(next_timer()));
      if (n < 0 && errno != EINTR)
        TANDEM_THROW(ErrorCode::Io, "epoll_wait failed: {}", net::errno_string(errno));
      for (int i = 0; i < n; ++i) {
        const std::uint64_t id = events[i].data.u64;
        if (id == kStopId) return;
        if (id == kListenId) {
          accept_all();
          continue;
        }
        auto it = conns.find(id);
        if (it == conns.end()) continue;  // closed earlier in this batch
        const std::uint32_t ev = events[i].events;
        guarded(id, [&] {
          if ((ev & EPOLLOUT) != 0 && !flush(id, it->second)) return;
          if ((ev & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) != 0) on_readable(id, it->second);
        });
      }
      on_timers(Clock::now());
      // A delivered reply can let its connection run a queued request that completes other
      // waiters in turn: drain until nothing is left, so no reply waits for the next event.
      for (auto ready = state.take_ready(); !ready.empty(); ready = state.take_ready())
        deliver(ready);
    }
  }

  void on_timers(Deadline now) {
    deliver(state.expire(now));
    if (now >= accept_resume) {
      accept_resume = Deadline::max();
      ctl(EPOLL_CTL_ADD, listen_fd.get(), EPOLLIN, kListenId);
    }
    while (!handshakes.empty() && handshakes.begin()->first <= now) {
      const std::uint64_t id = handshakes.begin()->second;
      handshakes.erase(handshakes.begin());
      reject(id, ErrorCode::Unauthenticated,
             fmt::format("no valid HELLO within {} ms", options.handshake_timeout.count()));
    }
  }

  void accept_all() {
    for (;;) {
      net::Fd fd(::accept4(listen_fd.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!fd) {
        const int err = errno;
        if (err == EAGAIN || err == EWOULDBLOCK) return;
        if (err == EINTR || err == ECONNABORTED || err == EPROTO) continue;
        // Out of descriptors (EMFILE/ENFILE) or memory: the pending connection stays queued
        // and would wake us forever; stop accepting briefly instead of spinning.
        if (auto note = warn_budget.take())
          TANDEM_WARN(store,
                      "store server on port {}: accept failed: {}; pausing accepts for {} ms{}",
                      port, net::errno_string(err), kAcceptPause.count(), *note);
        ::epoll_ctl(epoll_fd.get(), EPOLL_CTL_DEL, listen_fd.get(), nullptr);
        accept_resume = deadline_in(kAcceptPause);
        return;
      }
      std::string peer = net::peer_address(fd.get());
      if (conns.size() >= options.max_connections) {
        if (auto note = warn_budget.take())
          TANDEM_WARN(store,
                      "store server on port {}: refusing {}: already {} connections "
                      "(max_connections){}",
                      port, peer, conns.size(), *note);
        send_error_now(
            fd.get(), ErrorCode::Io,
            fmt::format("the store already has {} connections (its limit)", conns.size()));
        continue;
      }
      try {
        net::set_nodelay(fd.get());
      } catch (const Error&) {
        // Not fatal: only latency.
      }
      const std::uint64_t id = next_id++;
      const int raw = fd.get();
      Conn c;
      c.fd = std::move(fd);
      c.peer = std::move(peer);
      c.handshake_deadline = deadline_after_ms(options.handshake_timeout.count());
      try {
        ctl(EPOLL_CTL_ADD, raw, EPOLLIN | EPOLLRDHUP, id);
      } catch (const Error& e) {
        TANDEM_WARN(store, "store server on port {}: dropping {}: {}", port, c.peer, e.message());
        continue;
      }
      handshakes.emplace(c.handshake_deadline, id);
      TANDEM_DETAIL(store, "store server: connection from {}", c.peer);
      conns.emplace(id, std::move(c));
      connections = conns.size();
      ++accepted;
    }
  }

  void close_conn(std::uint64_t id) {
    auto it = conns.find(id);
    if (it == conns.end()) return;
    state.drop(id);
    handshakes.erase({it->second.handshake_deadline, id});
    // Closing the fd removes it from the epoll set.
    conns.erase(it);
    connections = conns.size();
  }

  // Best effort: the ERROR frame lets a well-behaved client report the reason.
  static void send_error_now(int fd, ErrorCode code, const std::string& text) {
    proto::Message m;
    m.type = proto::Type::error;
    m.number = static_cast<std::int64_t>(code);
    m.value = text.substr(0, proto::kMaxMessageBytes);
    const std::string bytes = proto::encode(m);
    [[maybe_unused]] const auto n =
        ::send(fd, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  }

  void reject(std::uint64_t id, ErrorCode code, const std::string& reason) {
    auto it = conns.find(id);
    if (it == conns.end()) return;
    if (auto note = warn_budget.take())
      TANDEM_WARN(store, "store server on port {}: closing connection from {}: {}{}", port,
                  it->second.peer, reason, *note);
    ++rejected;
    send_error_now(it->second.fd.get(), code, reason);
    close_conn(id);
  }

  void on_readable(std::uint64_t id, Conn& c) {
    bool eof = false;
    for (;;) {
      // HELLO may complete inside this loop, so the bound is re-evaluated on every read.
      const std::size_t cap =
          proto::kHeaderBytes + (c.authed ? limits : hello_limits).max_payload();
      std::size_t want = kReadChunk;
      if (c.in.size() >= proto::kHeaderBytes) {
        const auto h = proto::read_header(std::as_bytes(std::span(c.in)));
        const std::size_t frame = proto::kHeaderBytes + std::min<std::size_t>(h.payload_len, cap);
        if (frame > c.in.size()) want = std::clamp(frame - c.in.size(), kReadChunk, kMaxReadStep);
      }
      want = std::min(want, cap + kReadChunk - std::min(c.in.size(), cap));
      const std::size_t old = c.in.size();
      c.in.resize(old + want);
      const ssize_t got = ::recv(c.fd.get(), c.in.data() + old, want, 0);
      c.in.resize(old + (got > 0 ? static_cast<std::size_t>(got) : 0));
      if (got > 0) {
        if (c.in.size() > cap) {
          reject(id, ErrorCode::Internal,
                 fmt::format("sent more than {} bytes without waiting for a reply", cap));
          return;
        }
        // Check the header early so an oversized or foreign frame is refused before its
        // payload is buffered.
        if (!process(id, c)) return;
        continue;
      }
      if (got == 0) {
        eof = true;
        break;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      TANDEM_DETAIL(store, "store server: read from {} failed: {}", c.peer,
                    net::errno_string(errno));
      close_conn(id);
      return;
    }
    if (!eof) return;
    if (!c.in.empty()) {
      reject(id, ErrorCode::Internal,
             fmt::format("connection closed in the middle of a frame ({} bytes pending)",
                         c.in.size()));
    } else {
      TANDEM_DETAIL(store, "store server: {} disconnected", c.peer);
      close_conn(id);
    }
  }

  // Decodes and handles the complete frames in c.in while the connection is idle. Returns
  // false when the connection was closed.
  bool process(std::uint64_t id, Conn& c) {
    std::size_t off = 0;
    bool alive = true;
    while (!c.waiting && c.out.size() == c.out_off) {
      const auto bytes = std::as_bytes(std::span(c.in)).subspan(off);
      auto res = proto::decode_frame(bytes, c.authed ? limits : hello_limits);
      if (res.status == proto::DecodeResult::Status::need_more) break;
      if (res.status == proto::DecodeResult::Status::bad) {
        reject(id, ErrorCode::Internal, "malformed frame: " + res.error);
        return false;
      }
      off += res.consumed;
      if (!handle(id, c, std::move(res.message))) {
        alive = false;
        break;
      }
    }
    if (!alive) return false;
    c.in.erase(0, off);
    return true;
  }

  bool handle(std::uint64_t id, Conn& c, proto::Message&& m) {
    ++requests;
    if (!c.authed) {
      if (m.type != proto::Type::hello) {
        reject(id, ErrorCode::Unauthenticated,
               fmt::format("first frame is {}, not HELLO",
                           proto::type_name(static_cast<std::uint8_t>(m.type))));
        return false;
      }
      if (m.number != proto::kVersion) {
        reject(
            id, ErrorCode::Internal,
            fmt::format("HELLO for protocol version {} (this store speaks {}): use the same tandem "
                        "version on every host",
                        m.number, proto::kVersion));
        return false;
      }
      if (!options.token.empty() && !net::constant_time_equal(m.value, options.token)) {
        reject(id, ErrorCode::Unauthenticated, "authentication failed: wrong TANDEM_STORE_TOKEN");
        return false;
      }
      c.authed = true;
      handshakes.erase({c.handshake_deadline, id});
      c.handshake_deadline = Deadline::max();
      proto::Message ok;
      ok.type = proto::Type::ok;
      return send(id, c, ok);
    }
    auto out = state.handle(id, std::move(m));
    switch (out.kind) {
      case KvState::Outcome::Kind::violation:
        reject(id, ErrorCode::Internal, out.reason);
        return false;
      case KvState::Outcome::Kind::waiting:
        c.waiting = true;
        return true;
      case KvState::Outcome::Kind::reply:
        break;
    }
    return send(id, c, out.reply);
  }

  void deliver(const std::vector<KvState::Delivery>& replies) {
    for (const auto& reply : replies) {
      const std::uint64_t id = reply.first;  // not a structured binding: the lambda uses it
      const proto::Message& m = reply.second;
      auto it = conns.find(id);
      if (it == conns.end()) continue;
      it->second.waiting = false;
      guarded(id, [&] {
        if (send(id, it->second, m)) process(id, it->second);
      });
    }
  }

  // Queues a reply and writes what the socket takes now. False when the connection closed.
  bool send(std::uint64_t id, Conn& c, const proto::Message& m) {
    if (c.out_off == c.out.size()) {
      c.out.clear();
      c.out_off = 0;
    }
    proto::encode(m, c.out);
    return flush(id, c);
  }

  bool flush(std::uint64_t id, Conn& c) {
    while (c.out_off < c.out.size()) {
      const ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_off, c.out.size() - c.out_off,
                               MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        c.out_off += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!c.want_out) {
          ctl(EPOLL_CTL_MOD, c.fd.get(), EPOLLIN | EPOLLRDHUP | EPOLLOUT, id);
          c.want_out = true;
        }
        return true;
      }
      TANDEM_DETAIL(store, "store server: write to {} failed: {}", c.peer,
                    net::errno_string(errno));
      close_conn(id);
      return false;
    }
    c.out.clear();
    c.out_off = 0;
    if (c.want_out) {
      ctl(EPOLL_CTL_MOD, c.fd.get(), EPOLLIN | EPOLLRDHUP, id);
      c.want_out = false;
      return process(id, c);  // requests that arrived while the reply was going out
    }
    return true;
  }
};

TcpStoreServer::TcpStoreServer(TcpStoreServerOptions options) {
  net::Fd fd = net::listen_tcp(options.bind_address, options.port);
  impl_ = std::make_unique<Impl>(std::move(fd), std::move(options));
}

TcpStoreServer::TcpStoreServer(int listening_fd, TcpStoreServerOptions options) {
  TANDEM_CHECK_ARG(listening_fd >= 0, "TcpStoreServer: invalid listening fd {}", listening_fd);
  impl_ = std::make_unique<Impl>(net::Fd(listening_fd), std::move(options));
}

TcpStoreServer::~TcpStoreServer() = default;

std::uint16_t TcpStoreServer::port() const noexcept {
  return impl_->port;
}
const std::string& TcpStoreServer::bind_address() const noexcept {
  return impl_->options.bind_address;
}
std::size_t TcpStoreServer::connection_count() const {
  return impl_->connections.load();
}
std::size_t TcpStoreServer::rejected_count() const {
  return impl_->rejected.load();
}

}  // namespace tandem::store
