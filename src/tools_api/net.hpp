#pragma once
// The tools' internal API (docs/architecture.md, "The tools' internal API"): sockets and
// addresses (the core layer's own, from core/net.hpp, which depends on nothing but the public
// headers), and what the ranks' transports take from the host they run on.

#include "core/net.hpp"

#include <cstddef>
#include <string>
#include <string_view>

namespace tandem::tools_api {

using net::bound_port;
using net::connect_tcp;
using net::Fd;
using net::format_host_port;
using net::HostPort;
using net::listen_tcp;
using net::local_host_name;
using net::parse_host_port;
using net::parse_port;
using net::poll_timeout_ms;
using net::reserve_tcp_port;
using net::resolve;
using net::set_nonblocking;

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
