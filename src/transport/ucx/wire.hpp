#pragma once
// What goes over UCX: every message is one tagged UCX message of its payload alone (so that
// UCX may move large ones without a copy). The UCX tag carries the sender's rank in its high
// half and tandem's tag in its low half; a receive matches any tag from its peer (the mask
// covers the rank only) and then checks tandem's tag and the size UCX reports, so mismatched
// calls fail as on every other link instead of waiting. UCX matches the messages from one
// endpoint in the order they were sent (MPI's non-overtaking rule, which UCX keeps), so the
// k-th send from A to B completes B's k-th receive from A. Worker addresses travel through the
// store as hex text, bounded in size.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tandem::transport::ucx {

inline constexpr int kRankShift = 32;
inline constexpr std::uint64_t kRankMask = ~std::uint64_t{0} << kRankShift;

constexpr std::uint64_t make_tag(int sender, std::uint32_t tag) noexcept {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(sender)) << kRankShift) | tag;
}
constexpr std::uint32_t tandem_tag(std::uint64_t ucx_tag) noexcept {
  return static_cast<std::uint32_t>(ucx_tag);
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
