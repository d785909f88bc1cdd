#pragma once
// Tuning files (TANDEM_TUNING_FILE, written by `tandem-perf --tune`): per machine context
// (world size, hosts, transport), per collective, size ranges -> algorithm. A file is parsed
// and validated once per process; a communicator applies the one entry whose context
// matches its own, below TANDEM_ALGO and per-call choices.
//
// {"tandem_tuning": 1,
//  "entries": [{"context": {"world_size": 2, "hosts": 1, "transport": "shm", ...},
//               "collectives": {"allreduce": [{"from": 0, "to": 16384,
//                                              "algorithm": "recursive_doubling"}, ...]},
//               "measurements": {...}}]}
//
// A range covers call sizes from <= bytes < to (bytes as the selector counts them, see
// algorithms::size_class; "to" absent or null: no upper bound). Bounds are 0 or powers of
// two, so a range never splits a size class; sizes no range covers keep the built-in choice.

#include "algorithms/algorithm.hpp"
#include "comm/choice/policy.hpp"
#include "transport/mesh.hpp"

#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::comm {

/// What a tuning entry was measured on; an entry applies only to a communicator whose
/// world size, host count and transport are the same.
struct TuningContext {
  int world_size = 0;
  int hosts = 0;
  /// "shm" (every peer over shared memory), "tcp" (every peer over TCP) or "shm+tcp".
  std::string transport;

  bool operator==(const TuningContext&) const = default;
};

/// "2 ranks on 1 host over shm".
std::string to_string(const TuningContext& c);

/// The context of the communicator over `mesh`. Every rank computes the same, provided the
/// ranks agree on TANDEM_SHM_DISABLE (a rank alone on its host assumes its peers use shared
/// memory among themselves unless it has it disabled itself).
TuningContext tuning_context(const transport::Mesh& mesh);
/// The same from each rank's host identity (equal: same host) and this rank's link to every
/// rank (its own entry is ignored).
TuningContext tuning_context(std::span<const std::string> host_ids, int rank,
                             std::span<const transport::Link> links);

struct TuningRange {
  std::size_t from = 0;
  std::size_t to = 0;  ///< exclusive; 0: no upper bound
  const algorithms::Algorithm* algorithm = nullptr;

  bool covers(std::size_t bytes) const noexcept { return bytes >= from && (to == 0 || bytes < to); }
};

/// One entry of a file: its context and, per collective, sorted disjoint ranges.
struct TuningEntry {
  TuningContext context;
  std::array<std::vector<TuningRange>, kKindCount> ranges{};
  /// For messages: "entry 2 (2 ranks on 1 host over shm) of /path/tune.json".
  std::string label;

  /// The algorithm the entry names for a call of `kind` and `bytes`, or nullptr.
  const algorithms::Algorithm* lookup(CollectiveKind kind, std::size_t bytes) const noexcept;
  /// Stable text of the ranges (every rank of a communicator must apply the same).
  std::string digest() const;
};

struct TuningFile {
  std::string path;
  std::vector<TuningEntry> entries;

  /// The entry for `c`, or nullptr.
  const TuningEntry* match(const TuningContext& c) const noexcept;
};

/// Parses and validates a tuning file's text. Throws Error(InvalidArgument) naming `path`,
/// the entry and what to fix: malformed JSON, a missing or ill-typed field, an unknown
/// collective or algorithm, a bound that is not 0 or a power of two, ranges that are empty,
/// unsorted or overlap, two entries with one context.
TuningFile parse_tuning(std::string_view text, const std::string& path,
                        const algorithms::Registry& reg);

/// The file at `path`, read and parsed once per process (later calls return the same).
/// Throws Error(InvalidArgument) when it cannot be read or is invalid.
std::shared_ptr<const TuningFile> load_tuning_file(const std::string& path);

}  // namespace tandem::comm
