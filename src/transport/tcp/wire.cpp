#include "transport/tcp/wire.hpp"

#include "core/net.hpp"
#include "transport/endpoint.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>

#include <fmt/ranges.h>

#include <algorithm>
#include <arpa/inet.h>
#include <atomic>
#include <cstring>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

namespace tandem::transport::tcp {

std::string encode_hello(int from, int to, int world, int purpose, std::string_view token) {
  HelloHead h{kHelloMagic, kWireVersion, static_cast<std::uint16_t>(purpose),     from,
              to,          world,        static_cast<std::uint32_t>(token.size())};
  std::string out(sizeof h + token.size(), '\0');
  std::memcpy(out.data(), &h, sizeof h);
  std::memcpy(out.data() + sizeof h, token.data(), token.size());
  return out;
}

HelloParse parse_hello(std::span<const std::byte> bytes) noexcept {
  HelloParse p;
  if (bytes.size() < sizeof p.head) {
    p.need = sizeof p.head - bytes.size();
    return p;
  }
  std::memcpy(&p.head, bytes.data(), sizeof p.head);
  p.have_head = true;
  if (p.head.magic != kHelloMagic || p.head.token_bytes > kMaxTokenBytes) return p;
  const std::size_t have = bytes.size() - sizeof p.head;
  const std::size_t take = std::min<std::size_t>(have, p.head.token_bytes);
  p.token = {reinterpret_cast<const char*>(bytes.data()) + sizeof p.head, take};
  p.need = p.head.token_bytes - take;
  return p;
}

bool token_equal(std::string_view a, std::string_view b) noexcept {
  return net::constant_time_equal(a, b);
}

std::string check_hello(const HelloHead& head, std::string_view token, int self, int world,
                        std::string_view expected_token) {
  if (head.magic != kHelloMagic) return fmt::format("not a tandem peer (magic {:#x})", head.magic);
  if (head.version != kWireVersion)
    return fmt::format("wire version {} (this rank speaks {}): mixed tandem builds", head.version,
                       kWireVersion);
  if (head.world != world)
    return fmt::format("world size {} (this rank has {}): ranks of another job or restart round",
                       head.world, world);
  if (head.to != self)
    return fmt::format("addressed to rank {}, but this is rank {}", head.to, self);
  if (head.from < 0 || head.from >= world || head.from == self)
    return fmt::format("invalid sender rank {}", head.from);
  if (head.purpose > kMaxStreams && head.purpose != kSupersededPurpose)
    return fmt::format("invalid stream {}", head.purpose);
  if (head.token_bytes != token.size())
    return fmt::format("malformed token field ({} bytes announced)", head.token_bytes);
  if (!token_equal(token, expected_token))
    return fmt::format(
        "wrong token (claims to be rank {}); every rank must run with the same "
        "TANDEM_STORE_TOKEN",
        head.from);
  return {};
}

namespace {

// What the kernel granted for the first data socket of the process (it reports twice the
// payload it allows, and caps the request at net.core.[wr]mem_max).
void report_buffers(int fd) {
  static std::atomic<bool> said{false};
  if (said.exchange(true, std::memory_order_relaxed)) return;
  int snd = 0;
  int rcv = 0;
  socklen_t len = sizeof snd;
  ::getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &snd, &len);
  len = sizeof rcv;
  ::getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, &len);
  TANDEM_INFO(tcp,
              "data sockets: asked for {} KiB buffers each way, the kernel granted {} KiB send, "
              "{} KiB receive (as it reports them: twice the payload; it caps requests at "
              "net.core.wmem_max and rmem_max)",
              kSocketBuffer >> 10, snd >> 10, rcv >> 10);
}

}  // namespace

void tune_socket(int fd, bool data, bool same_host) {
  net::set_nonblocking(fd, true);
  net::set_nodelay(fd, true);
  if (!data) {
    // The control connection to another host is the link's liveness check: a cut cable or a
    // vanished host otherwise goes unnoticed (its data streams retransmit for ~15 minutes)
    // until TANDEM_TIMEOUT. Keepalive probes an idle connection, and the user timeout ends it
    // (ETIMEDOUT: PeerLost) once nothing came back for kLinkSilence. Data streams get
    // neither: there the user timeout also ends a healthy connection whose receiver merely
    // stopped reading (a zero window) for that long, i.e. a rank that is late.
    if (!same_host) {
      net::set_keepalive(fd, kKeepaliveIdle, kKeepaliveIdle, kLinkSilence / kKeepaliveIdle);
      const unsigned ms = kLinkSilence * 1000;
      if (::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms) != 0)
        TANDEM_DETAIL(tcp, "cannot set TCP_USER_TIMEOUT: {}", errno_text(errno));
    }
    return;
  }
  net::set_buffer_sizes(fd, kSocketBuffer, kSocketBuffer);
  report_buffers(fd);
  // Over loopback there is no congestion to control, and a pacing algorithm (bbr, a common
  // default) throttles a local stream to its own bandwidth estimate; reno does not, and every
  // kernel allows it unprivileged (docs/benchmarks.md). Links between hosts keep the
  // system's choice.
  if (same_host) {
    static constexpr char kReno[] = "reno";
    if (::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, kReno, sizeof kReno - 1) != 0)
      TANDEM_DETAIL(tcp, "cannot select the reno congestion control: {}", errno_text(errno));
  }
}

bool IfnameFilter::matches(std::string_view ifname) const noexcept {
  const bool listed = std::any_of(names.begin(), names.end(), [&](const std::string& n) {
    return exact ? ifname == n : ifname.starts_with(n);
  });
  return listed != exclude;
}

IfnameFilter parse_ifname_filter(std::string_view spec, std::string_view variable) {
  IfnameFilter f;
  std::string_view rest = spec;
  if (rest.starts_with('^')) {
    f.exclude = true;
    rest.remove_prefix(1);
  }
  if (rest.starts_with('=')) {
    f.exact = true;
    rest.remove_prefix(1);
  }
  while (true) {
    const auto comma = rest.find(',');
    const std::string_view name = rest.substr(0, comma);
    TANDEM_CHECK_ARG(!name.empty(),
                     "{}={}: an empty interface name (give e.g. eth0, eth,ib, ^docker,lo or "
                     "=eth0)",
                     variable, spec);
    f.names.emplace_back(name);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return f;
}

std::string interface_address(std::string_view spec, std::string_view variable,
                              std::string* chosen) {
  const IfnameFilter filter = parse_ifname_filter(spec, variable);
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0)
    TANDEM_THROW(ErrorCode::Io, "cannot list network interfaces: {}", errno_text(errno));
  std::string found;
  std::vector<std::string> names;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    names.emplace_back(i->ifa_name);
    if (found.empty() && filter.matches(i->ifa_name)) {
      char buf[INET_ADDRSTRLEN] = {};
      sockaddr_in a;
      std::memcpy(&a, i->ifa_addr, sizeof a);
      ::inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf);
      found = buf;
      if (chosen != nullptr) *chosen = i->ifa_name;
    }
  }
  ::freeifaddrs(list);
  if (found.empty())
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "{}={}: no interface with an IPv4 address matches; this host has: {}", variable,
                 spec, fmt::join(names, ", "));
  return found;
}

std::string route_address(std::string_view host) {
  std::vector<net::SockAddr> addrs;
  try {
    addrs = net::resolve(host, 9);
  } catch (const Error&) {
    return {};
  }
  for (const auto& a : addrs) {
    net::Fd fd(::socket(a.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd || ::connect(fd.get(), a.get(), a.len) != 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) != 0) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    if (local.ss_family == AF_INET)
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&local)->sin_addr, buf, sizeof buf);
    else
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr, buf, sizeof buf);
    return buf;
  }
  return {};
}

bool is_loopback(std::string_view host) {
  if (host == "localhost") return true;
  std::vector<net::SockAddr> addrs;
  try {
    addrs = net::resolve(host, 9);
  } catch (const Error&) {
    return false;
  }
  for (const auto& a : addrs) {
    if (a.family() == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a.get());
      if ((ntohl(in->sin_addr.s_addr) >> 24) != 127) return false;
    } else if (a.family() == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a.get());
      if (!IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) return false;
    }
  }
  return !addrs.empty();
}

}  // namespace tandem::transport::tcp
