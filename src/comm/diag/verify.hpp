#pragma once
// Debug mode (TANDEM_DEBUG=DETAIL): before each collective, every rank sends every other a
// small record of its call and compares. A mismatch that would otherwise only end at the
// deadline (ranks waiting on different peers) is reported at once, with each rank's call.

#include "algorithms/algorithm.hpp"
#include "transport/mesh.hpp"

namespace tandem::comm {

/// Throws Error(Mismatch) listing every rank's call when the ranks' calls differ.
void verify_call(transport::Mesh& mesh, const algorithms::Call& call);

}  // namespace tandem::comm
