#pragma once
// Socket helpers shared by the store, the TCP transport and the launcher: an owning fd,
// address parsing and resolution, listen/connect with clear errors, and deadline-bounded
// full reads and writes. Every blocking call here takes a Deadline and never waits past it.

#include <tandem/error.hpp>
#include <tandem/types.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <sys/socket.h>
#include <vector>

namespace tandem::net {

/// An owned file descriptor: move-only, closed on destruction.
class Fd {
 public:
  Fd() noexcept = default;
  explicit Fd(int fd) noexcept : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  explicit operator bool() const noexcept { return valid(); }
  /// Gives up ownership without closing.
  int release() noexcept {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  /// Closes the current fd (if any) and takes `fd`.
  void reset(int fd = -1) noexcept;

 private:
  int fd_ = -1;
};

/// The peer closed the connection (EOF, ECONNRESET or EPIPE) during read_full/write_full.
/// Code PeerLost; callers that know who the peer is rethrow with a better message.
class ConnectionClosed : public Error {
 public:
  using Error::Error;
};

/// A host and a port, as parsed from "host:port".
struct HostPort {
  std::string host;  ///< hostname, IPv4 literal or IPv6 literal (without brackets)
  std::uint16_t port = 0;
};

/// Parses "host:port", "1.2.3.4:port", "[::1]:port", or a bare host / IPv6 literal when
/// `default_port` is given. Throws Error(InvalidArgument) naming the text.
HostPort parse_host_port(std::string_view text, std::optional<std::uint16_t> default_port = {});

/// Parses a decimal port 1..65535 (0 when `allow_zero`); nullopt when malformed.
std::optional<std::uint16_t> parse_port(std::string_view text, bool allow_zero = false) noexcept;

/// A resolved socket address.
struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;

  int family() const noexcept { return storage.ss_family; }
  const sockaddr* get() const noexcept { return reinterpret_cast<const sockaddr*>(&storage); }
  /// "1.2.3.4:80" or "[::1]:80".
  std::string str() const;
};

/// "1.2.3.4:80" / "[::1]:80" / "unix:<path>" / "<unknown address>".
std::string format_address(const sockaddr* addr, socklen_t len);
/// "host:port", bracketing IPv6 literals.
std::string format_host_port(std::string_view host, std::uint16_t port);

/// Resolves `host` (name or literal; empty = wildcard when `passive`) for TCP.
/// Throws Error(Io) naming the host and the resolver's reason.
std::vector<SockAddr> resolve(std::string_view host, std::uint16_t port, bool passive = false);

/// Binds and listens on bind_addr:port (port 0: any free port; empty address: every
/// interface), with SO_REUSEADDR and close-on-exec. An address in use throws Error(Io)
/// naming address:port and how to find the holder.
Fd listen_tcp(std::string_view bind_addr, std::uint16_t port, int backlog = 512);

/// Reserves a free port on bind_addr for another process to listen on later: a socket bound
/// to port 0 with SO_REUSEADDR and never listening. While it is open, bind(0) anywhere on the
/// host does not pick that port, yet a server that binds it with SO_REUSEADDR (PyTorch's
/// TCPStore, tandem's store) can: no window between choosing the port and using it.
Fd reserve_tcp_port(std::string_view bind_addr);

/// The local port a socket is bound to.
std::uint16_t bound_port(int fd);

/// Connects to host:port, retrying refused/unreachable attempts with exponential backoff
/// (10 ms doubling to 1 s) until `deadline`. Returns a blocking socket with TCP_NODELAY set.
/// Throws Error(Io) (or Timeout when the last attempt got no answer) naming the address, the
/// last error and the usual causes.
Fd connect_tcp(std::string_view host, std::uint16_t port, Deadline deadline);

void set_nonblocking(int fd, bool on = true);
void set_nodelay(int fd, bool on = true);
/// Sets SO_SNDBUF / SO_RCVBUF; 0 leaves that one unchanged. The kernel may clamp.
void set_buffer_sizes(int fd, std::size_t send_bytes, std::size_t recv_bytes);
/// Enables TCP keepalive so a silently vanished host is noticed (idle/interval in seconds).
void set_keepalive(int fd, int idle_s = 10, int interval_s = 5, int count = 3);
/// TCP_USER_TIMEOUT: the connection fails (ETIMEDOUT) once bytes it sent, or its keepalive
/// probes, have gone unacknowledged for `seconds`: a cut link or a vanished host. Only for a
/// peer that always reads (the kernel also ends a connection whose receiver leaves its window
/// shut that long). Best effort, as set_keepalive.
void set_user_timeout(int fd, int seconds);

/// Reads exactly `n` bytes before `deadline`. Works on blocking and non-blocking fds, retries
/// EINTR. Throws ConnectionClosed on EOF/reset, Error(Timeout) at the deadline, Error(Io)
/// otherwise; the message names the peer address.
void read_full(int fd, void* buf, std::size_t n, Deadline deadline);
/// Writes exactly `n` bytes before `deadline` (no SIGPIPE). Errors as read_full.
void write_full(int fd, const void* buf, std::size_t n, Deadline deadline);

/// Waits until `fd` is readable (events = POLLIN) or writable (POLLOUT) or the deadline
/// passes; EINTR-safe. Returns false at the deadline.
bool poll_one(int fd, short events, Deadline deadline);

/// Milliseconds until `deadline` for poll()/epoll_wait(): 0 when passed, -1 for
/// Deadline::max(), rounded up so that a wake-up is never early.
int poll_timeout_ms(Deadline deadline) noexcept;

/// "Connection refused (111)": strerror text and number, thread-safe.
std::string errno_string(int err);

/// The remote address of a connected socket ("1.2.3.4:5678"), or "<unknown address>".
std::string peer_address(int fd);
/// The local address of a socket.
std::string local_address(int fd);
/// gethostname(), or "localhost" if that fails.
std::string local_host_name();

/// Compares shared secrets in time that depends on their lengths only, not on where they
/// differ (every byte of the longer one is looked at).
bool constant_time_equal(std::string_view a, std::string_view b) noexcept;

}  // namespace tandem::net
