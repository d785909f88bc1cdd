#pragma once
// The tools' internal API (docs/architecture.md, "The tools' internal API"): the algorithms
// the selector chooses among and the tuning files (TANDEM_TUNING_FILE) that `tandem-perf
// --tune` writes. Not a public API: it changes with the tools that use it.

#include <tandem/communicator.hpp>
#include <tandem/types.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::tools_api {

/// What a tuning entry is measured on; the runtime applies an entry only to a communicator
/// whose world size, host count and transport are the same.
struct TuningContext {
  int world_size = 0;
  int hosts = 0;
  /// "shm" (every peer over shared memory), "tcp" (every peer over TCP) or "shm+tcp".
  std::string transport;
};

/// The context the runtime computes for `comm` from its mesh, rebuilt from what every rank
/// says. Collective: every rank of `comm` calls it (one allgather).
TuningContext tuning_context(Communicator& comm);
/// "2 ranks on 1 host over shm".
std::string to_string(const TuningContext& c);

/// The built-in algorithms of `kind`, by name (as TANDEM_ALGO spells them), in registration
/// order.
std::vector<std::string> algorithm_names(CollectiveKind kind);
/// For a call of `kind` on `world` ranks, of `bytes` counted as nccl-tests does (the output of
/// allgather, the input of reduce_scatter, per rank otherwise) as f32: whether algorithm
/// `name` runs it, and which one the built-in choice (no TANDEM_ALGO, no tuning file) is.
bool algorithm_supports(CollectiveKind kind, std::string_view name, std::size_t bytes, int world);
std::string builtin_algorithm(CollectiveKind kind, std::size_t bytes, int world);

/// Checks a tuning file's text as the runtime checks TANDEM_TUNING_FILE: throws
/// Error(InvalidArgument) naming `path`, the entry and what to fix.
void check_tuning_file(std::string_view text, const std::string& path);

/// "1M", "64K", "12": a byte count in the binary units of the settings.
std::string format_bytes(std::size_t bytes);

}  // namespace tandem::tools_api
