#pragma once
// The tools' internal API (docs/architecture.md, "The tools' internal API"): sockets and
// addresses, and what the ranks' transports take from the host they run on. Not a public API:
// it changes with the tools that use it.

#include <tandem/types.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <sys/socket.h>
#include <utility>
#include <vector>

namespace tandem::tools_api {

/// An owned file descriptor (a socket, a pipe, a signalfd...): move-only, closed on
/// destruction.
class Fd {
 public:
  Fd() noexcept = default;
  explicit Fd(int fd) noexcept : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    reset(other.release());
    return *this;
  }
  ~Fd() { reset(); }

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  /// Gives up ownership without closing.
  int release() noexcept { return std::exchange(fd_, -1); }
  /// Closes the current descriptor (if any) and takes `fd`.
  void reset(int fd = -1) noexcept;

 private:
  int fd_ = -1;
};

/// A host and a port, as parsed from "host:port".
struct HostPort {
  std::string host;  ///< name, IPv4 literal or IPv6 literal (without brackets)
  std::uint16_t port = 0;
};

/// Parses "host:port", "1.2.3.4:port", "[::1]:port", or a bare host or IPv6 literal when
/// `default_port` is given. Throws Error(InvalidArgument) naming the text.
HostPort parse_host_port(std::string_view text, std::optional<std::uint16_t> default_port = {});
/// Parses a decimal port 1..65535 (0 too when `allow_zero`); nullopt when malformed.
std::optional<std::uint16_t> parse_port(std::string_view text, bool allow_zero = false) noexcept;
/// "host:port", bracketing IPv6 literals.
std::string format_host_port(std::string_view host, std::uint16_t port);
/// The addresses `host` (a name or a literal) resolves to for TCP. Throws Error(Io) naming
/// the host and the resolver's reason.
std::vector<sockaddr_storage> resolve(std::string_view host);

/// Binds and listens on bind_addr:port (port 0: a free port; empty address: every interface),
/// close-on-exec. An address in use throws Error(Io) whose message says "already in use".
Fd listen_tcp(std::string_view bind_addr, std::uint16_t port);
/// Reserves a free port on bind_addr for another process to listen on later: while the Fd is
/// open, bind(0) anywhere on the host does not pick that port, yet a server that binds it with
/// SO_REUSEADDR (PyTorch's TCPStore, tandem's store) can.
Fd reserve_tcp_port(std::string_view bind_addr);
/// The local port a socket is bound to.
std::uint16_t bound_port(int fd);
/// Connects to host:port, retrying refused and unreachable attempts until `deadline`. Throws
/// Error(Io), or Error(Timeout) when the last attempt got no answer, naming the address.
Fd connect_tcp(std::string_view host, std::uint16_t port, Deadline deadline);
/// Sets O_NONBLOCK on `fd`.
void set_nonblocking(int fd);
/// Milliseconds until `deadline` for poll(): 0 when passed, -1 for Deadline::max(), rounded up
/// so that a wake-up is never early.
int poll_timeout_ms(Deadline deadline) noexcept;
/// gethostname(), or "localhost" when that fails.
std::string local_host_name();

/// The interfaces the ranks listen on and the variable that named them: TANDEM_SOCKET_IFNAME,
/// else NCCL_SOCKET_IFNAME, else GLOO_SOCKET_IFNAME; `list` is empty when none is set.
struct IfnameSetting {
  std::string list;
  std::string variable = "TANDEM_SOCKET_IFNAME";
};
IfnameSetting socket_ifname_setting();
/// The address a rank of this host listens on: the first interface `ifname` selects (NCCL's
/// syntax; `source` names the variable it came from) when set; else, when MASTER_ADDR names
/// another host, the local address that routes to it; else loopback. Throws Error when no
/// interface matches.
std::string choose_listen_address(const std::string& ifname, std::string_view source);
/// TANDEM_BUFFSIZE: the bytes of each shared-memory channel, or 0 for auto. Error when
/// malformed.
std::size_t shm_buffer_setting();
/// Bytes of /dev/shm that the shared-memory segments of `local_ranks` ranks of one host take,
/// with channels of `buffer_bytes` (TANDEM_BUFFSIZE; 0: auto).
std::size_t shm_bytes_needed(int local_ranks, std::size_t buffer_bytes);

}  // namespace tandem::tools_api
