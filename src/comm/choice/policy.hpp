#pragma once
// Which algorithm runs a call: a per-call choice (strict), the communicator's forced choice
// from CommOptions::algorithm / TANDEM_ALGO (lenient: falls back when it does not apply),
// else the matching entry of a tuning file (TANDEM_TUNING_FILE, lenient too), else the
// registry's default by size and world size.

#include "algorithms/algorithm.hpp"

#include <tandem/communicator.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>

namespace tandem::comm {

inline constexpr std::size_t kKindCount = static_cast<std::size_t>(CollectiveKind::barrier) + 1;

inline std::size_t index_of(CollectiveKind k) noexcept {
  return static_cast<std::size_t>(k);
}

struct TuningEntry;
struct TuningFile;

class AlgoPolicy {
 public:
  AlgoPolicy() = default;
  /// Parses "ring" (every collective that has a ring) or "allreduce=ring,broadcast=tree".
  /// Throws InvalidArgument naming `source` for an unknown collective or algorithm name.
  AlgoPolicy(std::string_view spec, std::string_view source, const algorithms::Registry& reg);
  AlgoPolicy(const AlgoPolicy& other);
  AlgoPolicy& operator=(const AlgoPolicy& other);

  /// The algorithm for `call`: `per_call` (strict: InvalidArgument when unknown or not
  /// applicable), else the forced one when it applies, else the registry's default.
  const algorithms::Algorithm& choose(const algorithms::Registry& reg, const algorithms::Call& call,
                                      int world, std::string_view per_call) const;

  /// Applies `entry` (of `file`, which keeps it alive; nullptr: none) below the forced
  /// choice: where it names an algorithm for a call's size that supports the call.
  void set_tuning(std::shared_ptr<const TuningFile> file, const TuningEntry* entry);
  /// The applied tuning entry, or nullptr.
  const TuningEntry* tuning() const noexcept { return tuning_; }

  /// The forced name for `kind` ("" when none).
  std::string_view forced(CollectiveKind kind) const noexcept { return forced_[index_of(kind)]; }
  /// The spec as given ("" when none).
  const std::string& spec() const noexcept { return spec_; }

 private:
  std::string spec_;
  std::string source_;
  std::array<std::string, kKindCount> forced_{};
  /// The fallback of a forced algorithm is logged once per collective.
  mutable std::array<std::atomic<bool>, kKindCount> fallback_logged_{};
  std::shared_ptr<const TuningFile> tuning_file_;
  const TuningEntry* tuning_ = nullptr;
  /// The fallback of a tuned algorithm, likewise.
  mutable std::array<std::atomic<bool>, kKindCount> tuning_fallback_logged_{};

  // The default choice per (collective, dtype, size class), which is all it depends on for
  // one world size (see Algorithm::supports): training loops repeat the same call shapes,
  // and asking every algorithm again costs about as much as a small message over shared
  // memory. An entry is the built-in registry's index of the choice plus one (0: not known
  // yet); every writer stores the same value, so relaxed atomics need no lock. The world
  // size is the first one asked about (a communicator's); other sizes are not cached.
  static constexpr std::size_t kDtypeCount = std::size(kAllDataTypes);
  static constexpr std::size_t kSizeClasses = 65;  // std::bit_width of a 64-bit byte count
  mutable std::array<std::atomic<std::uint8_t>, kKindCount * kDtypeCount * kSizeClasses> choices_{};
  mutable std::atomic<int> cached_world_{0};
  /// The algorithm last named per call, per collective (built-in registry only).
  mutable std::array<std::atomic<const algorithms::Algorithm*>, kKindCount> named_{};

  const algorithms::Algorithm& choose_default(const algorithms::Registry& reg,
                                              const algorithms::Call& call, int world) const;
};

/// The algorithm name that `forced` (TANDEM_ALGO syntax) chooses for `kind`, or "" when it
/// names none for it. Entries are separated by ',' or ';': a bare name ("ring") applies to
/// every collective, "allreduce=ring" to one; a per-collective entry wins over a bare one.
/// Throws InvalidArgument for a malformed string or an unknown collective name.
std::string_view forced_algorithm(std::string_view forced, CollectiveKind kind);

/// Every algorithm name of `kind`, comma separated (for error messages).
std::string algorithm_names(const algorithms::Registry& reg, CollectiveKind kind);

/// A call of the given shape, `bytes` counted as nccl-tests does (the output of allgather
/// and gather, the input of reduce_scatter and scatter; per rank otherwise), as f32.
algorithms::Call probe_call(CollectiveKind kind, std::size_t bytes, int world,
                            const algorithms::HostLayout* hosts = nullptr);

/// "0-8K recursive_doubling, 16K+ ring": the choice for sizes 4 B .. 1 GiB in powers of two.
std::string describe_choices(const AlgoPolicy& policy, const algorithms::Registry& reg,
                             CollectiveKind kind, int world,
                             const algorithms::HostLayout* hosts = nullptr);

/// "1M", "64K", "12": a byte count in the binary units of the settings.
std::string format_bytes(std::size_t bytes);

}  // namespace tandem::comm
