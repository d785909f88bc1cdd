// tandemrun: the launcher. `tandemrun --nproc-per-node N PROGRAM [ARGS...]` starts N workers
// on this node with torchrun's environment and supervises them; the same command on every
// node of a multi-node run joins them into one run (see --help).
#include "agent.hpp"
#include "check.hpp"
#include "options.hpp"
#include "output.hpp"
#include "supervisor.hpp"
#include "tools_api/trace.hpp"
#include "worker.hpp"

#include <tandem/error.hpp>
#include <tandem/settings.hpp>

#include <fmt/format.h>

#include <exception>
#include <string_view>

namespace {

using namespace tandem::tools::tandemrun;

void fail_line(std::string_view text) {
  write_all(2, fmt::format("tandemrun: {}\n", text));
}

// TANDEM_TRACE=FILE: each worker wrote FILE.rank<N>.json; join them into FILE.
void merge_trace() {
  std::string file;
  try {
    file = tandem::settings::get_string("TANDEM_TRACE");
    if (file.empty()) return;
    const auto parts = tandem::tools_api::merge_trace_parts(file, true);
    if (parts > 0)
      write_all(2, fmt::format("tandemrun: timeline of {} rank{} written to {} (open it in "
                               "ui.perfetto.dev or chrome://tracing)\n",
                               parts, parts == 1 ? "" : "s", file));
  } catch (const tandem::Error& e) {
    fail_line(fmt::format("{} (the parts stay; merge them with tandemrun --merge-trace {})",
                          e.message(), file));
  }
}

int launch(const LaunchOptions& options) {
  if (options.check) return run_check(options);
  std::string program;
  try {
    program = resolve_program(options.command.front());
  } catch (const ProgramError& e) {
    fail_line(e.message);
    return e.exit_code;
  }
  try {
    Agent agent(options, program);
    const int status = agent.run();
    merge_trace();
    return status;
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
    if (argc == 3 && std::string_view(argv[1]) == "--merge-trace") {
      const auto parts = tandem::tools_api::merge_trace_parts(argv[2], true);
      if (parts == 0) {
        fail_line(fmt::format("no trace parts {}.rank<N>.json found", argv[2]));
        return 1;
      }
      write_all(2, fmt::format("tandemrun: merged {} part{} into {}\n", parts,
                               parts == 1 ? "" : "s", argv[2]));
      return 0;
    }
    const ParseResult parsed = parse_command_line(argc, argv);
    if (!parsed.options) return parsed.exit_code;
    return launch(*parsed.options);
  } catch (const tandem::Error& e) {
    fail_line(e.message());
    return 1;
  } catch (const std::exception& e) {
    fail_line(fmt::format("internal error: {}", e.what()));
    return 1;
  }
}
