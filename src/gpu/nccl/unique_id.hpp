#pragma once
// The NCCL unique id travels through tandem's store, not a second rendezvous: rank 0 makes
// it and publishes it under the communicator's namespace, the others wait for it (noticing
// a rank that died meanwhile) with the communicator's deadline.

#include <tandem/store.hpp>
#include <tandem/types.hpp>

#include <functional>
#include <nccl.h>
#include <string>
#include <string_view>

namespace tandem::gpu {

/// `id` as text (hex) and back; from_text throws InvalidArgument for anything else.
std::string to_text(const ncclUniqueId& id);
ncclUniqueId unique_id_from_text(std::string_view text);

/// Rank 0 calls ncclGetUniqueId and publishes the id under `key`; every rank returns it.
/// Throws Timeout at `deadline` naming what it waited for, and what `check_peers` throws
/// (called every kLivenessPoll while waiting).
ncclUniqueId exchange_unique_id(store::Store& store, std::string_view key, int rank,
                                Deadline deadline, const std::function<void()>& check_peers);

}  // namespace tandem::gpu
