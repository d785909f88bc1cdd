#pragma once
// What goes over UCX: every message is one tagged UCX message of two parts, a header (the
// tandem tag and size, checked against the posted receive) and the payload. The UCX tag
// carries the sender's rank and a per-pair sequence number, so that the k-th send from A to B
// matches B's k-th receive from A, as on every other link. Worker addresses travel through the
// store as hex text, bounded in size.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tandem::transport::ucx {

struct Header {
  std::uint32_t tag;
  std::uint32_t magic;
  std::uint64_t bytes;
};
static_assert(sizeof(Header) == 16);
inline constexpr std::uint32_t kHeaderMagic = 0x58554454;  // "TDUX"

/// Bits of the UCX tag that carry the sequence number; the rest carry the sender's rank.
inline constexpr int kSeqBits = 40;
inline constexpr std::uint64_t kSeqMask = (std::uint64_t{1} << kSeqBits) - 1;
inline constexpr int kMaxRanks = 1 << (64 - kSeqBits);

constexpr std::uint64_t make_tag(int sender, std::uint64_t seq) noexcept {
  return (static_cast<std::uint64_t>(sender) << kSeqBits) | (seq & kSeqMask);
}

/// The largest worker address accepted from a peer (UCX's are a few hundred bytes).
inline constexpr std::size_t kMaxAddressBytes = 64u << 10;

std::string to_hex(std::string_view bytes);
/// Nullopt when `hex` is not an even-length hex string of at most 2 * kMaxAddressBytes.
std::optional<std::string> from_hex(std::string_view hex);

/// The lanes of an endpoint as ucp_ep_print_info() prints them, reduced to "tcp/eth0,
/// rc_mlx5/mlx5_0:1" (transport/device, each once), or empty when none is listed.
std::string summarize_lanes(std::string_view ep_info);

}  // namespace tandem::transport::ucx
