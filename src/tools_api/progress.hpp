#pragma once
// The tools' internal API (docs/architecture.md, "The tools' internal API"): the progress and
// flight records that every rank's communicator publishes in the store, and the diagnosis of
// where a job is stuck. Not a public API: it changes with the tools that use it.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::tools_api {

/// Store keys, under the communicator's prefix, of rank `rank`'s progress record (published
/// while its collectives move) and of its flight record (published when its communicator
/// failed, with the error).
std::string progress_key(int rank);
std::string flight_key(int rank);
/// Key of rank `rank`'s address record (setup's): it stands for the progress record of a rank
/// that has published none yet (progress_from_address()).
std::string address_key(int rank);

/// What one rank's record says.
struct ProgressRecord {
  int rank = 0;
  std::uint64_t done = 0;  ///< collectives completed
  std::string error;       ///< flight records: the error that failed the communicator
  std::string text;        ///< the record as published
};

/// The record in `text`; nullopt when it is not a progress or flight record.
std::optional<ProgressRecord> decode_progress(std::string_view text);
/// The record of rank `rank`, which entered no collective yet, from its address record `text`;
/// nullopt when `text` is not one.
std::optional<ProgressRecord> progress_from_address(std::string_view text, int rank);

/// What the ranks' records say about the collective the job is stuck in, or nullopt when no
/// rank is inside one. `records[r]` is rank r's record (nullopt: none published); `lost[r]`
/// marks ranks known to be dead (their record is their last word, not the present). Example:
/// "allreduce #1234 (f32 x 1000): ranks 0,1,3 waiting in it since 12:00:01.250; rank 2 never
/// entered it (last completed #1233)".
std::optional<std::string> diagnose(std::span<const std::optional<ProgressRecord>> records,
                                    const std::vector<bool>& lost);

}  // namespace tandem::tools_api
