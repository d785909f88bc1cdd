#pragma once
// tandemrun --check: the things users check by hand when a job will not start, run by the same
// command line on every node, through the same rendezvous: the store at --master-addr/port is
// reachable and takes the token, every node runs the same tandem, the network interface the
// ranks will listen on exists, /dev/shm holds the local ranks' segments, the GPUs asked for
// are visible, and the clocks agree. Every node prints one line per check and node, with what
// to do where one fails, and exits 1 if any failed.

#include "options.hpp"

#include <string_view>

namespace tandem::tools::tandemrun {

/// Runs the checks; returns the exit status (0: all passed).
int run_check(const LaunchOptions& options);

/// What a failed start suggests: tandemrun --check with the same flags on every node.
std::string_view check_advice() noexcept;

}  // namespace tandem::tools::tandemrun
