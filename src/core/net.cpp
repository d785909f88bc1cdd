#include "core/net.hpp"

#include <tandem/log.hpp>

#include <climits>

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>

namespace tandem::net {
namespace {

std::string errno_text(int err) {
  return errno_string(err);
}

bool is_closed_errno(int err) {
  return err == ECONNRESET || err == EPIPE || err == ENOTCONN;
}

// Errors after which another connect attempt may succeed (the server is not up yet, a
// route is still coming up, a DNS record is not published yet).
bool is_retriable_connect_errno(int err) {
  switch (err) {
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case ETIMEDOUT:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EHOSTDOWN:
    case ENETDOWN:
    case EAGAIN:
    case EINTR:
    case EADDRNOTAVAIL:
      return true;
    default:
      return false;
  }
}

bool same_endpoint(int fd) {
  sockaddr_storage a{}, b{};
  socklen_t la = sizeof a, lb = sizeof b;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &la) != 0) return false;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&b), &lb) != 0) return false;
  return la == lb && std::memcmp(&a, &b, la) == 0;
}

}  // namespace

std::string errno_string(int err) {
  char buf[256];
  // GNU strerror_r: returns a pointer to the text (buf or a static string).
  const char* text = ::strerror_r(err, buf, sizeof buf);
  return fmt::format("{} ({})", text, err);
}

void Fd::reset(int fd) noexcept {
  if (fd_ >= 0 && fd_ != fd) ::close(fd_);  // close() errors are not actionable here
  fd_ = fd;
}

std::optional<std::uint16_t> parse_port(std::string_view text, bool allow_zero) noexcept {
  unsigned value = 0;
  const auto* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || p != end || value > 65535) return std::nullopt;
  if (value == 0 && !allow_zero) return std::nullopt;
  return static_cast<std::uint16_t>(value);
}

HostPort parse_host_port(std::string_view text, std::optional<std::uint16_t> default_port) {
  auto bad = [&](std::string_view why) {
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "cannot parse address '{}': {} (expected host:port, 1.2.3.4:port or [::1]:port)",
                 text, why);
  };
  std::string_view host;
  std::string_view port_text;
  if (text.starts_with('[')) {
    const auto close = text.find(']');
    if (close == std::string_view::npos) bad("missing ']' after the IPv6 address");
    host = text.substr(1, close - 1);
    const auto rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') bad("unexpected text after ']'");
      port_text = rest.substr(1);
    }
  } else if (const auto colon = text.rfind(':');
             colon != std::string_view::npos && std::count(text.begin(), text.end(), ':') == 1) {
    host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  } else {
    host = text;  // no port, or a bare IPv6 literal (which cannot carry one without brackets)
  }
  if (host.empty()) bad("empty host");
  HostPort out{std::string(host), 0};
  if (port_text.empty()) {
    if (!default_port) bad("missing port");
    out.port = *default_port;
  } else {
    const auto port = parse_port(port_text);
    if (!port) bad(fmt::format("invalid port '{}' (1..65535)", port_text));
    out.port = *port;
  }
  return out;
}

std::string format_address(const sockaddr* addr, socklen_t len) {
  if (addr == nullptr || len == 0) return "<unknown address>";
  char host[INET6_ADDRSTRLEN] = {};
  if (addr->sa_family == AF_INET && len >= static_cast<socklen_t>(sizeof(sockaddr_in))) {
    sockaddr_in a;
    std::memcpy(&a, addr, sizeof a);
    ::inet_ntop(AF_INET, &a.sin_addr, host, sizeof host);
    return fmt::format("{}:{}", host, ntohs(a.sin_port));
  }
  if (addr->sa_family == AF_INET6 && len >= static_cast<socklen_t>(sizeof(sockaddr_in6))) {
    sockaddr_in6 a;
    std::memcpy(&a, addr, sizeof a);
    ::inet_ntop(AF_INET6, &a.sin6_addr, host, sizeof host);
    return fmt::format("[{}]:{}", host, ntohs(a.sin6_port));
  }
  if (addr->sa_family == AF_UNIX) {
    sockaddr_un a{};
    std::memcpy(&a, addr, std::min<std::size_t>(len, sizeof a));
    return fmt::format("unix:{}",
                       std::string_view(a.sun_path, strnlen(a.sun_path, sizeof a.sun_path)));
  }
  return "<unknown address>";
}

std::string format_host_port(std::string_view host, std::uint16_t port) {
  if (host.find(':') != std::string_view::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

std::string SockAddr::str() const {
  return format_address(get(), len);
}

std::vector<SockAddr> resolve(std::string_view host, std::uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_protocol = IPPROTO_TCP;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  const std::string host_z(host);
  const std::string port_z = std::to_string(port);
  addrinfo* res = nullptr;
  const int rc =
      ::getaddrinfo(host_z.empty() ? nullptr : host_z.c_str(), port_z.c_str(), &hints, &res);
  if (rc != 0) {
    const std::string why = rc == EAI_SYSTEM ? errno_text(errno) : ::gai_strerror(rc);
    TANDEM_THROW(ErrorCode::Io,
                 "cannot resolve host '{}': {} (check the host name or use an IP address)", host,
                 why);
  }
  std::vector<SockAddr> out;
  for (const addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_addrlen > sizeof(sockaddr_storage)) continue;
    SockAddr a;
    std::memcpy(&a.storage, ai->ai_addr, ai->ai_addrlen);
    a.len = ai->ai_addrlen;
    out.push_back(a);
  }
  ::freeaddrinfo(res);
  if (out.empty()) TANDEM_THROW(ErrorCode::Io, "host '{}' resolved to no TCP address", host);
  return out;
}

namespace {

// A close-on-exec TCP socket for `a`'s family with SO_REUSEADDR; empty (errno set) on failure.
Fd reusable_socket(const SockAddr& a) {
  Fd fd(::socket(a.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd) {
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  }
  return fd;
}

}  // namespace

Fd reserve_tcp_port(std::string_view bind_addr) {
  int last_err = 0;
  for (const auto& a : resolve(bind_addr, 0, /*passive=*/true)) {
    Fd fd = reusable_socket(a);
    if (!fd) {
      last_err = errno;
      continue;
    }
    if (::bind(fd.get(), a.get(), a.len) == 0) return fd;
    last_err = errno;
  }
  TANDEM_THROW(ErrorCode::Io, "cannot reserve a port on {}: {} (check the address)",
               bind_addr.empty() ? "*" : bind_addr, errno_text(last_err));
}

Fd listen_tcp(std::string_view bind_addr, std::uint16_t port, int backlog) {
  auto addrs = resolve(bind_addr, port, /*passive=*/true);
  // For the wildcard, prefer the IPv6 wildcard in dual-stack mode: it accepts both families.
  if (bind_addr.empty())
    std::stable_partition(addrs.begin(), addrs.end(),
                          [](const SockAddr& a) { return a.family() == AF_INET6; });
  int last_err = 0;
  std::string last_addr = format_host_port(bind_addr.empty() ? "*" : bind_addr, port);
  for (const auto& a : addrs) {
    Fd fd = reusable_socket(a);
    if (!fd) {
      last_err = errno;
      continue;
    }
    if (a.family() == AF_INET6 && bind_addr.empty()) {
      const int zero = 0;
      ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    }
    last_addr = a.str();
    if (::bind(fd.get(), a.get(), a.len) != 0) {
      last_err = errno;
      if (last_err == EADDRINUSE) {
        TANDEM_THROW(
            ErrorCode::Io,
            "cannot listen on {}: address already in use; choose another port "
            "(--master-port / MASTER_PORT) or find the holder with `ss -ltnp 'sport = :{}'`",
            last_addr, port);
      }
      continue;
    }
    if (::listen(fd.get(), backlog) != 0) {
      last_err = errno;
      continue;
    }
    return fd;
  }
  TANDEM_THROW(ErrorCode::Io, "cannot listen on {}: {} (check the bind address)", last_addr,
               errno_text(last_err));
}

std::uint16_t bound_port(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    TANDEM_THROW(ErrorCode::Io, "getsockname() failed: {}", errno_text(errno));
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&a)->sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&a)->sin6_port);
  TANDEM_THROW(ErrorCode::InvalidArgument, "fd {} is not a TCP socket", fd);
}

int poll_timeout_ms(Deadline deadline) noexcept {
  if (deadline == Deadline::max()) return -1;
  const auto now = Clock::now();
  if (deadline <= now) return 0;
  const auto left = deadline - now;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

bool poll_one(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int timeout = poll_timeout_ms(deadline);
    const int rc = ::poll(&p, 1, timeout);
    if (rc > 0) return true;  // ready, or an error/hangup the next read/write will report
    if (rc < 0 && errno != EINTR)
      TANDEM_THROW(ErrorCode::Io, "poll() on fd {} failed: {}", fd, errno_text(errno));
    if (rc == 0 && Clock::now() >= deadline) return false;
  }
}

namespace {

// One connect attempt, bounded by `deadline`. Returns the socket, or an invalid Fd with
// *err set (ETIMEDOUT when the attempt itself ran out of time).
Fd try_connect(const SockAddr& a, Deadline deadline, int* err) {
  Fd fd(::socket(a.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) {
    *err = errno;
    return {};
  }
  int rc = ::connect(fd.get(), a.get(), a.len);
  if (rc != 0 && errno != EINPROGRESS && errno != EINTR) {
    *err = errno;
    return {};
  }
  if (rc != 0) {
    if (!poll_one(fd.get(), POLLOUT, deadline)) {
      *err = ETIMEDOUT;
      return {};
    }
    int so_error = 0;
    socklen_t len = sizeof so_error;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) so_error = errno;
    if (so_error != 0) {
      *err = so_error;
      return {};
    }
  }
  // A loopback connect to a port in the ephemeral range with no listener can connect the
  // socket to itself (TCP simultaneous open); that is no server, so retry.
  if (same_endpoint(fd.get())) {
    *err = ECONNREFUSED;
    return {};
  }
  return fd;
}

}  // namespace

Fd connect_tcp(std::string_view host, std::uint16_t port, Deadline deadline) {
  using namespace std::chrono_literals;
  const std::string where = format_host_port(host, port);
  auto backoff = std::chrono::milliseconds(10);
  int attempts = 0;
  int last_err = 0;
  std::string last_reason;
  const auto start = Clock::now();
  for (;;) {
    ++attempts;
    std::vector<SockAddr> addrs;
    try {
      addrs = resolve(host, port);
    } catch (const Error& e) {
      last_reason = e.message();
      last_err = 0;
    }
    for (const auto& a : addrs) {
      int err = 0;
      Fd fd = try_connect(a, deadline, &err);
      if (fd) {
        set_nonblocking(fd.get(), false);
        set_nodelay(fd.get(), true);
        if (attempts > 1) TANDEM_DETAIL(tcp, "connected to {} after {} attempts", where, attempts);
        return fd;
      }
      last_err = err;
      last_reason = errno_text(err);
      if (!is_retriable_connect_errno(err)) {
        TANDEM_THROW(ErrorCode::Io, "cannot connect to {} ({}): {}; check MASTER_ADDR/MASTER_PORT",
                     where, a.str(), last_reason);
      }
    }
    const auto now = Clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, 1s);
  }
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  const ErrorCode code = last_err == ETIMEDOUT ? ErrorCode::Timeout : ErrorCode::Io;
  TANDEM_THROW(code,
               "cannot connect to {} after {} attempts over {:.1f} s (last error: {}): is the "
               "server running and reachable? check MASTER_ADDR/MASTER_PORT and firewalls",
               where, attempts, waited, last_reason);
}

void set_nonblocking(int fd, bool on) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0)
    TANDEM_THROW(ErrorCode::Io, "fcntl(F_GETFL) on fd {} failed: {}", fd, errno_text(errno));
  const int want = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (want != flags && ::fcntl(fd, F_SETFL, want) != 0)
    TANDEM_THROW(ErrorCode::Io, "fcntl(F_SETFL) on fd {} failed: {}", fd, errno_text(errno));
}

void set_nodelay(int fd, bool on) {
  const int v = on ? 1 : 0;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, sizeof v) != 0)
    TANDEM_THROW(ErrorCode::Io, "setsockopt(TCP_NODELAY) on fd {} failed: {}", fd,
                 errno_text(errno));
}

void set_buffer_sizes(int fd, std::size_t send_bytes, std::size_t recv_bytes) {
  auto set = [fd](int opt, const char* name, std::size_t bytes) {
    if (bytes == 0) return;
    const int v = static_cast<int>(std::min<std::size_t>(bytes, INT_MAX));
    if (::setsockopt(fd, SOL_SOCKET, opt, &v, sizeof v) != 0)
      TANDEM_THROW(ErrorCode::Io, "setsockopt({}, {}) on fd {} failed: {}", name, bytes, fd,
                   errno_text(errno));
  };
  set(SO_SNDBUF, "SO_SNDBUF", send_bytes);
  set(SO_RCVBUF, "SO_RCVBUF", recv_bytes);
}

void set_keepalive(int fd, int idle_s, int interval_s, int count) {
  const int one = 1;
  // Best effort: keepalive only speeds up detection; a failure here is not fatal.
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof interval_s);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

void set_user_timeout(int fd, int seconds) {
  const unsigned ms = static_cast<unsigned>(seconds) * 1000u;
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms);
}

namespace {

// What read_full()/write_full() do after a call that moved nothing and set errno: retry
// (EINTR; ENOTSOCK turns `is_socket` off), wait until the fd is ready (EAGAIN), or throw:
// PeerLost for a closed connection, Timeout at the deadline, Io otherwise. `events`: POLLIN
// for a read, POLLOUT for a write.
void after_io_error(int fd, short events, bool& is_socket, std::size_t done, std::size_t n,
                    Deadline deadline) {
  const bool reading = events == POLLIN;
  const int err = errno;
  if (err == EINTR) return;
  if (err == ENOTSOCK && is_socket) {
    is_socket = false;
    return;
  }
  if (err == EAGAIN || err == EWOULDBLOCK) {
    if (!poll_one(fd, events, deadline))
      TANDEM_THROW(ErrorCode::Timeout, "timed out {} {} ({} of {} bytes {})",
                   reading ? "reading from" : "writing to", peer_address(fd), done, n,
                   reading ? "received" : "sent");
    return;
  }
  if (is_closed_errno(err))
    throw ConnectionClosed(
        ErrorCode::PeerLost,
        fmt::format("connection to {} lost: {}", peer_address(fd), errno_text(err)), __FILE__,
        __LINE__);
  TANDEM_THROW(ErrorCode::Io, "{} {} failed: {}", reading ? "read from" : "write to",
               peer_address(fd), errno_text(err));
}

}  // namespace

void read_full(int fd, void* buf, std::size_t n, Deadline deadline) {
  auto* p = static_cast<std::byte*>(buf);
  std::size_t done = 0;
  bool is_socket = true;
  while (done < n) {
    // A blocking non-socket fd would block in read() past the deadline: poll it first.
    if (!is_socket && !poll_one(fd, POLLIN, deadline))
      TANDEM_THROW(ErrorCode::Timeout, "timed out reading from fd {} ({} of {} bytes received)", fd,
                   done, n);
    ssize_t got =
        is_socket ? ::recv(fd, p + done, n - done, MSG_DONTWAIT) : ::read(fd, p + done, n - done);
    if (got > 0) {
      done += static_cast<std::size_t>(got);
      continue;
    }
    if (got == 0)
      throw ConnectionClosed(ErrorCode::PeerLost,
                             fmt::format("connection to {} closed by the peer after {} of {} bytes",
                                         peer_address(fd), done, n),
                             __FILE__, __LINE__);
    after_io_error(fd, POLLIN, is_socket, done, n, deadline);
  }
}

void write_full(int fd, const void* buf, std::size_t n, Deadline deadline) {
  const auto* p = static_cast<const std::byte*>(buf);
  std::size_t done = 0;
  bool is_socket = true;
  while (done < n) {
    if (!is_socket && !poll_one(fd, POLLOUT, deadline))
      TANDEM_THROW(ErrorCode::Timeout, "timed out writing to fd {} ({} of {} bytes sent)", fd, done,
                   n);
    ssize_t put = is_socket ? ::send(fd, p + done, n - done, MSG_DONTWAIT | MSG_NOSIGNAL)
                            : ::write(fd, p + done, n - done);
    if (put >= 0) {
      done += static_cast<std::size_t>(put);
      continue;
    }
    after_io_error(fd, POLLOUT, is_socket, done, n, deadline);
  }
}

std::string peer_address(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "<unknown address>";
  return format_address(reinterpret_cast<const sockaddr*>(&a), len);
}

std::string local_address(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "<unknown address>";
  return format_address(reinterpret_cast<const sockaddr*>(&a), len);
}

std::string local_host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

bool constant_time_equal(std::string_view a, std::string_view b) noexcept {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  const std::size_t n = a.size() > b.size() ? a.size() : b.size();
  for (std::size_t i = 0; i < n; ++i) {
    const auto x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0u;
    const auto y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0u;
    diff |= x ^ y;
  }
  return diff == 0;
}

}  // namespace tandem::net
