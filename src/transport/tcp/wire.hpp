#pragma once
// What goes over tcp: the HELLO that opens every connection (control or data stream), the
// frame header of a message on a data stream, how a large message is striped over the
// streams, and the socket helpers the net layer does not have.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::transport::tcp {

// ---- HELLO -----------------------------------------------------------------------------

inline constexpr std::uint32_t kHelloMagic = 0x484e4454;  // "TDNH"
inline constexpr std::uint16_t kWireVersion = 2;
inline constexpr std::uint32_t kMaxTokenBytes = 1024;
/// Purpose 0 is the control connection; 1 + k is data stream k.
inline constexpr int kControlPurpose = 0;
inline constexpr int kMaxStreams = 64;
/// The purpose of an answer that declines a connection because this rank is connecting to the
/// sender itself, and its connection is the one kept (tcp/connector.hpp).
inline constexpr int kSupersededPurpose = 0xffff;

struct HelloHead {
  std::uint32_t magic;
  std::uint16_t version;
  std::uint16_t purpose;
  std::int32_t from;
  std::int32_t to;
  std::int32_t world;
  std::uint32_t token_bytes;
};
static_assert(sizeof(HelloHead) == 24);

std::string encode_hello(int from, int to, int world, int purpose, std::string_view token);

/// A HELLO as far as it has been received. `need` is how many more bytes to read before it
/// can be checked: 0 once it is complete, and also as soon as the head shows it cannot be
/// valid (foreign magic, a token over kMaxTokenBytes), so that nothing more is read from
/// a stranger. `token` points into the parsed bytes.
struct HelloParse {
  HelloHead head{};
  bool have_head = false;
  std::string_view token;
  std::size_t need = 0;
};
HelloParse parse_hello(std::span<const std::byte> bytes) noexcept;
/// Why `head` + `token` is not a valid HELLO for the receiving rank `self` of `world`
/// (empty when it is). The token comparison takes the same time wherever they differ.
std::string check_hello(const HelloHead& head, std::string_view token, int self, int world,
                        std::string_view expected_token);
/// Constant-time comparison (time depends on the lengths only).
bool token_equal(std::string_view a, std::string_view b) noexcept;

// ---- data frames -------------------------------------------------------------------------

struct FrameHeader {
  std::uint32_t tag;
  std::uint32_t flags;
  std::uint64_t bytes;  ///< the whole message, on every stream that carries a part of it
};
static_assert(sizeof(FrameHeader) == 16);
inline constexpr std::uint32_t kFlagStriped = 1;

/// Messages from this size on are striped over every data stream of the peer.
inline constexpr std::uint64_t kStripeMin = 256u << 10;

struct Part {
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  std::uint64_t size() const noexcept { return end - begin; }
};

constexpr bool is_striped(std::uint64_t bytes, int streams) noexcept {
  return streams > 1 && bytes >= kStripeMin;
}
/// Stream 0 carries every message; the others only parts of striped ones.
constexpr bool carries(std::uint64_t bytes, int stream, int streams) noexcept {
  return stream == 0 || is_striped(bytes, streams);
}
/// The bytes of a message that stream `k` carries: 64-byte aligned slices, so a reduction
/// never splits an element between streams.
constexpr Part part_of(std::uint64_t bytes, int k, int streams) noexcept {
  if (!is_striped(bytes, streams)) return Part{0, k == 0 ? bytes : 0};
  const std::uint64_t n = static_cast<std::uint64_t>(streams);
  const std::uint64_t per = ((bytes + n - 1) / n + 63) / 64 * 64;
  const std::uint64_t begin = static_cast<std::uint64_t>(k) * per < bytes ? k * per : bytes;
  const std::uint64_t end = begin + per < bytes ? begin + per : bytes;
  return Part{begin, end};
}

// ---- sockets -----------------------------------------------------------------------------

/// Socket buffer size of data streams: a 10 Gbit/s link (1.25 GB/s) needs a window of its
/// bandwidth x round-trip time, 4 MiB covers 3.3 ms of RTT (within a rack it is well under
/// 1 ms). The kernel caps the request at net.core.wmem_max / rmem_max (often 4 MiB too; raise
/// them for longer links); the granted sizes are logged once at TANDEM_DEBUG=INFO.
inline constexpr std::size_t kSocketBuffer = 4u << 20;

/// Seconds without any answer after which the control connection to a peer on another host
/// fails (a cut link or a vanished host: PeerLost), and the idle time between keepalive probes.
inline constexpr int kLinkSilence = 10;
inline constexpr int kKeepaliveIdle = 2;

/// Non-blocking, TCP_NODELAY; data streams get large buffers and, between two ranks of one
/// host, a congestion control that does not pace; control connections to another host get
/// keepalive and a user timeout of kLinkSilence (see wire.cpp).
void tune_socket(int fd, bool data, bool same_host);
/// An interface list in NCCL's syntax (NCCL_SOCKET_IFNAME, which tandem also takes for
/// TANDEM_SOCKET_IFNAME and GLOO_SOCKET_IFNAME): comma-separated name prefixes ("eth,ib");
/// a leading '^' excludes the listed ones instead ("^docker,lo"); a leading '=' (after any
/// '^') makes the names exact ("=eth0", "^=docker0").
struct IfnameFilter {
  bool exclude = false;
  bool exact = false;
  std::vector<std::string> names;
  bool matches(std::string_view ifname) const noexcept;
};
/// Throws Error(InvalidArgument) naming `variable` for an empty list or entry.
IfnameFilter parse_ifname_filter(std::string_view spec, std::string_view variable);

/// The IPv4 address of the first interface (in the system's order) that `spec` selects;
/// `variable` names where `spec` came from in messages. Throws Error(InvalidArgument)
/// listing the interfaces there are when none matches. *chosen gets the interface's name.
std::string interface_address(std::string_view spec, std::string_view variable,
                              std::string* chosen = nullptr);
/// The local address this host uses to reach `host` (a UDP connect; nothing is sent), or
/// empty when `host` cannot be resolved or routed.
std::string route_address(std::string_view host);
/// True for "localhost", 127.0.0.0/8 and ::1, and names resolving only to them.
bool is_loopback(std::string_view host);

}  // namespace tandem::transport::tcp
