// tandemrun: the launcher. `tandemrun --nproc-per-node N PROGRAM [ARGS...]` starts N workers
// on this node with torchrun's environment and supervises them; the same command on every
// node of a multi-node run joins them into one run (see --help).
#include "agent.hpp"
#include "options.hpp"
#include "output.hpp"
#include "supervisor.hpp"
#include "worker.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>

#include <exception>

namespace {

using namespace tandem::tools::tandemrun;

void fail_line(std::string_view text) {
  write_all(2, fmt::format("tandemrun: {}\n", text));
}

int launch(const LaunchOptions& options) {
  std::string program;
  try {
    program = resolve_program(options.command.front());
  } catch (const ProgramError& e) {
    fail_line(e.message);
    return e.exit_code;
  }
  try {
    Agent agent(options, program);
    return agent.run();
  } catch (const tandem::Error& e) {
    fail_line(e.message());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  ensure_standard_fds();
  // Before any thread exists (the store runs one), so every thread inherits the mask and the
  // signals reach the signalfd only.
  block_signals();
  try {
    const ParseResult parsed = parse_command_line(argc, argv);
    if (!parsed.options) return parsed.exit_code;
    return launch(*parsed.options);
  } catch (const std::exception& e) {
    fail_line(fmt::format("internal error: {}", e.what()));
    return 1;
  }
}
