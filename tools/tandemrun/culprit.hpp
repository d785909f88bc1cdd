#pragma once
// The collectives part of the failure summary: node 0 reads every worker's progress and
// flight records from the store (the world communicator publishes them under
// tandem/r<round>/world/) and says which collective the ranks were in, who never entered
// it, and what error each failed rank reported.

#include "records.hpp"

#include <tandem/store.hpp>

#include <string>
#include <vector>

namespace tandem::tools::tandemrun {

/// Lines for the summary's "Collectives" section; empty when the workers published nothing
/// (not tandem programs, or they failed before creating a communicator).
std::vector<std::string> collective_report(store::Store& store, int round, int world_size,
                                           const std::vector<NodeReport>& reports);

}  // namespace tandem::tools::tandemrun
