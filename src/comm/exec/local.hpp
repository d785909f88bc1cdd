#pragma once
// A one-rank communicator has no peers: every collective is a copy of in to out.

#include "algorithms/algorithm.hpp"

namespace tandem::comm {

/// Runs `call` on a group of one rank.
void run_local(const algorithms::Call& call);

}  // namespace tandem::comm
