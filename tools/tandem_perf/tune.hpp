#pragma once
// tandem-perf --tune: times every applicable algorithm of each collective at each power of
// two from -b to -e, chooses per size (the built-in choice unless another beats it by more
// than --tune-margin), prints the table and writes the tuning file (rank 0) that
// TANDEM_TUNING_FILE reads.

#include "options.hpp"

#include <tandem/communicator.hpp>

namespace tandem::tools::perf {

/// Collective: every rank runs it. Returns the exit status (0, or 1 when a result was wrong).
int tune(Communicator& comm, const PerfOptions& options);

}  // namespace tandem::tools::perf
