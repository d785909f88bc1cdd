#pragma once
// What each rank tells the others (and tandemrun) about its collectives through the store:
// the last one it entered and the last one it completed, with the shape of the current one.
// The monitor publishes it twice a second while it changes ("progress/<rank>" under the
// communicator's prefix) and, with the error and the flight recorder, when the communicator
// fails ("flight/<rank>"). diagnose() turns every rank's record into the one-line answer to
// "who is everyone waiting for?".

#include <tandem/communicator.hpp>
#include <tandem/types.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::comm {

struct ProgressRecord {
  int rank = 0;
  std::string host;
  int pid = 0;
  std::uint64_t entered = 0;  ///< collectives entered: the current/last one is #entered-1
  std::uint64_t done = 0;     ///< collectives completed: the last one is #done-1
  CollectiveKind kind = CollectiveKind::barrier;  ///< of #entered-1
  DataType dtype = DataType::u8;
  std::uint64_t count = 0;
  int root = 0;
  std::int64_t since_ms = 0;        ///< wall clock (ms since the epoch) when #entered-1 started
  std::string error;                ///< flight records: the error that failed the communicator
  std::vector<std::string> recent;  ///< flight records: the last operations, oldest first

  /// Inside a collective: entered it and not completed it (running, or it failed).
  bool inside() const noexcept { return entered > done; }
  /// "allreduce #12 (f32 x 1024)" for collective #entered-1.
  std::string current() const;

  /// Text form (key=value lines; the error and the recent operations last).
  std::string encode() const;
  /// nullopt for anything that is not a record of this format.
  static std::optional<ProgressRecord> decode(std::string_view text);
  /// What rank `rank` stands for before it published a record of its own: its address record
  /// (setup's "addr/<rank>", `text`) gives its host and pid, and it has entered no collective.
  /// nullopt when `text` is not an address record.
  static std::optional<ProgressRecord> from_address(std::string_view text, int rank);
};

/// What the ranks' records say about the collective the job is stuck in, or nullopt when no
/// rank is inside a collective. `records[r]` is rank r's record (nullopt: none published);
/// `lost[r]` marks ranks known to be dead (their record is their last word, not the
/// present). Example: "allreduce #1234 (f32 x 1000): ranks 0,1,3 waiting in it since
/// 12:00:01.250; rank 2 never entered it (last completed #1233)".
/// `disagree` (optional) is set when ranks inside that collective made different calls.
std::optional<std::string> diagnose(std::span<const std::optional<ProgressRecord>> records,
                                    const std::vector<bool>& lost = {}, bool* disagree = nullptr);

/// "12:00:01.250" (local time) for a wall clock in ms since the epoch.
std::string format_wall_ms(std::int64_t ms);

}  // namespace tandem::comm
