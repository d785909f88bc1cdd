#pragma once
// Which ranks a PeerLost error names as lost: what Communicator::lost_ranks() returns.

#include <string_view>
#include <vector>

namespace tandem::comm {

/// The ranks below `size` that `message` names "rank N (host H, pid P)" (the transport's
/// name of a peer, transport::MeshImpl::who), in the order named, each once; not those named
/// after "reported by ", which only relayed the loss.
std::vector<int> ranks_named_lost(std::string_view message, int size);

}  // namespace tandem::comm
