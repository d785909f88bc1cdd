#pragma once
// Starting one worker process: fork + execve with the worker's environment, its stdout and
// stderr on pipes, stdin on /dev/null, in its own process group (so that a terminal's Ctrl-C
// reaches tandemrun only, which forwards it exactly once to each group), and with
// PR_SET_PDEATHSIG=SIGKILL so that no worker outlives tandemrun.

#include "tools_api/net.hpp"

#include <string>
#include <sys/types.h>
#include <vector>

namespace tandem::tools::tandemrun {

/// PROGRAM could not be found or run: the one line to print, and the shell's exit code
/// (127 not found, 126 not executable).
struct ProgramError {
  std::string message;
  int exit_code = 127;
};

/// Resolves PROGRAM like execvp() would (names without '/' are searched in PATH). Returns
/// the path to execute, or throws ProgramError.
std::string resolve_program(const std::string& name);

/// A started worker: its pid (also its process group id) and the read ends of its pipes.
struct SpawnedWorker {
  pid_t pid = -1;
  tools_api::Fd out;
  tools_api::Fd err;
};

/// Starts `path` with `argv` and exactly the environment `env` ("NAME=value" each). The
/// child restores an empty signal mask and default dispositions before exec, and binds
/// itself to `cpus` (OS indices) when not empty. Throws Error(Io) when pipes or fork fail. A
/// failed exec (or binding) makes the child print why and exit 127.
SpawnedWorker spawn_worker(const std::string& path, const std::vector<std::string>& argv,
                           const std::vector<std::string>& env, const std::vector<int>& cpus = {});

/// Ensures fds 0, 1 and 2 are open (on /dev/null if not), so that pipes created later never
/// land on them.
void ensure_standard_fds() noexcept;

}  // namespace tandem::tools::tandemrun
