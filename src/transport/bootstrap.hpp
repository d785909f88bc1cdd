#pragma once
// Setup steps shared by every transport: where this rank listens, what it publishes about
// itself through the store ("addr/<rank>"), and how it gathers the others' records with a
// deadline that names the ranks still missing.

#include "transport/mesh.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::transport {

namespace testing {
/// Called at each named step of connect_mesh ("start", "published addresses", "gathered
/// addresses", "connected setup peers", "exchanged records", "connected"), so that tests can
/// kill a rank at an exact point of setup. Null outside tests.
inline void (*setup_step_hook)(std::string_view step) = nullptr;
inline void setup_step(std::string_view step) {
  if (setup_step_hook != nullptr) setup_step_hook(step);
}
}  // namespace testing

/// Where rank r publishes its RankRecord in the communicator's store: "addr/<r>".
inline constexpr std::string_view kAddressPrefix = "addr/";

/// What every rank publishes about itself.
struct RankRecord {
  PeerInfo info;
  std::string address;  ///< where its listener is bound
  std::uint16_t port = 0;
  bool shm_disable = false;
  int streams = 1;  ///< its TANDEM_SOCKETS_PER_PEER
  std::string ucx;  ///< its UCX worker address in hex, empty when it does not offer UCX
};

std::string encode_record(const RankRecord& r);
/// Throws Error(Internal) naming `rank` when `text` is not a record of this version.
RankRecord decode_record(std::string_view text, int rank);

/// hostname + boot id + network namespace: equal on two ranks means they share a host
/// (and can share memory); two containers or namespaces on one machine differ.
std::string local_host_id();

/// The interface list the ranks listen on and the variable it came from:
/// TANDEM_SOCKET_IFNAME, else NCCL_SOCKET_IFNAME, else GLOO_SOCKET_IFNAME; empty when none is
/// set (then choose_listen_address() follows the route to MASTER_ADDR).
struct IfnameSetting {
  std::string list;
  std::string variable = "TANDEM_SOCKET_IFNAME";
};
IfnameSetting socket_ifname_setting();

/// TANDEM_BUFFSIZE: the bytes of each shared-memory channel, or 0 for auto (the size
/// shm_channel_bytes() gives for the host's ranks). Error(InvalidArgument) when malformed.
std::size_t shm_buffer_setting();

/// Bytes of /dev/shm that the shared-memory segments of `local_ranks` ranks of one host take,
/// with channels of `buffer_bytes` (TANDEM_BUFFSIZE; 0: auto).
std::size_t shm_bytes_needed(int local_ranks, std::size_t buffer_bytes);

/// The address of the first interface `ifname` selects (NCCL's syntax; `source` names the
/// variable it came from) if set; else, when MASTER_ADDR names another host, the local
/// address that routes to it; else loopback. Says which at TANDEM_DEBUG=INFO.
std::string choose_listen_address(const std::string& ifname, std::string_view source);

/// What gather() publishes and reads.
struct GatherSpec {
  std::string_view prefix;    ///< rank r publishes "<prefix><r>"
  std::string_view what;      ///< what the keys hold, for messages ("addresses")
  std::span<const int> from;  ///< the ranks whose keys are read
  /// When > 0, also waits until that many ranks have published: each adds to a counter
  /// ("<prefix>published") and the last one sets "<prefix>all" (one request more per rank, two
  /// for the last). Whatever setup waits for afterwards, every rank has started.
  int everyone = 0;
};

/// Sets `<prefix><rank>` to `value`, then waits for the keys of every rank in spec.from and
/// returns their values (in the order of spec.from). The wait is `read_keys` when set (one
/// store request, which ends as soon as a rank is lost: MeshOptions::read_keys), else
/// multi_get slices of `poll` with `check_peers` (when set) between them. On timeout the error
/// names the missing ranks and what they were expected to publish.
std::vector<std::string> gather(store::Store& store, int rank, std::string_view value,
                                const GatherSpec& spec, Deadline deadline,
                                const std::function<void()>& check_peers,
                                const ReadKeys& read_keys = {},
                                std::chrono::milliseconds poll = kLivenessPoll);

}  // namespace tandem::transport
