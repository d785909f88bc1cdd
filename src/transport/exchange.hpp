#pragma once
// Every rank's setup record, gathered over the connections setup makes first rather than read
// from the store: Bruck's allgather in ceil(log2 N) steps. At step k rank r sends the records
// it has to r - 2^k and receives as many from r + 2^k (mod N), so no rank or server handles
// more than N records, and the store serves O(log N) keys per rank instead of N.

#include <tandem/types.hpp>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace tandem::transport {

/// The ranks r + 2^k and r - 2^k (mod size) for every 2^k < size, without `rank`, ascending:
/// the peers setup connects first, and all that allgather_records() talks to. Symmetric: q is
/// in the list of p exactly when p is in the list of q. At most 2 ceil(log2 size) ranks.
std::vector<int> setup_peers(int rank, int size);

/// The largest record a peer may send: reads are bounded by it.
inline constexpr std::size_t kMaxRecordBytes = std::size_t{64} << 10;

/// Every rank's record, `mine` at `rank`. `fd_of(p)` is a connected non-blocking socket to
/// each rank p of setup_peers(); nothing else may be read from or written to them meanwhile,
/// and the exchange reads exactly its own bytes. Throws PeerLost naming a peer that closed its
/// connection, Internal for a malformed frame, Timeout at `deadline` naming the step and peer.
/// A rank that dies mid-exchange is seen as a closed connection by the ranks waiting for it,
/// which fail and close theirs in turn, so the failure reaches every rank without asking the
/// store. (Asking it then could name one of those ranks: the store records the first
/// disconnect it handles, not the first death.)
std::vector<std::string> allgather_records(int rank, int size, std::string mine,
                                           const std::function<int(int peer)>& fd_of,
                                           Deadline deadline);

}  // namespace tandem::transport
