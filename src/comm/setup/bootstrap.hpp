#pragma once
// Building a communicator's state: settings, the store namespace, the mesh, the summary
// logged at TANDEM_DEBUG=INFO. create(), from_env() and split() wrap the result.

#include "comm/impl.hpp"

#include <tandem/communicator.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace tandem::comm {

/// Validates the arguments, connects the mesh (size > 1) and returns the state of a new
/// communicator. `is_world` communicators set the rank shown in log lines. `lost_key`: the
/// store key (on `store`, unprefixed) a split watches for dead ranks, its parent's; empty
/// for a new group, which registers its own.
std::unique_ptr<Communicator::Impl> build(std::shared_ptr<store::Store> store, int rank, int size,
                                          CommOptions options, bool is_world,
                                          std::string lost_key = {});

/// The store namespace a group's communicators start from: CommOptions::store_prefix, else
/// "tandem/r<TANDEM_RESTART_COUNT>/world".
std::string group_prefix(const CommOptions& options);

/// Ends the setup of a communicator made by shrink(), grow() or join(): a barrier. Setup can
/// end before every pair is connected (tcp peers connect at their first message); the barrier
/// makes every rank hear from the others, so that a rank lost during setup fails it on every
/// rank instead of leaving some with a communicator that needs it. Its error says
/// "<who> was lost while the new communicator was set up: ...".
std::shared_ptr<Communicator> after_barrier(std::shared_ptr<Communicator> comm,
                                            const std::string& who);

/// The communicator timeout: CommOptions::timeout, else TANDEM_TIMEOUT.
std::chrono::milliseconds timeout_from(const CommOptions& options);

/// "1-3,5,7,8": runs of three or more become ranges.
std::string format_ranks(const std::vector<int>& sorted_ranks);

}  // namespace tandem::comm
