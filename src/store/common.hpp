#pragma once
// Helpers every store implementation shares: integer values, key limits, and the messages
// of the errors a store raises (so that every store words them the same way).

#include <tandem/types.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace tandem::store {

/// Longest key any store accepts.
inline constexpr std::size_t kMaxKeyBytes = 4096;
/// Most keys one wait()/check() may name.
inline constexpr std::size_t kMaxKeysPerCall = 4096;

/// The deadline `ms` milliseconds from now as a request carries it: negative means none, and
/// absurdly large values saturate to none instead of overflowing.
Deadline deadline_after_ms(std::int64_t ms) noexcept;

/// Parses a whole decimal int64 ("-12"); nullopt when anything else.
std::optional<std::int64_t> parse_int(std::string_view text) noexcept;

/// The value `add(key, delta)` stores when the key currently holds `current` (nullopt =
/// absent, counted as 0). Throws Error(InvalidArgument) for a non-integer value or overflow.
std::string add_value(std::string_view key, const std::optional<std::string_view>& current,
                      std::int64_t delta, std::int64_t* result);

/// A key made safe for a log line or a message: quoted, control and non-ASCII bytes escaped,
/// very long keys shortened.
std::string printable(std::string_view key);

/// "'a', 'b', 'c' and 12 more".
std::string describe_keys(std::span<const std::string> keys, std::size_t max_named = 16);

/// Throws Error(InvalidArgument) when a key is longer than kMaxKeyBytes.
void check_key(std::string_view key);
/// Throws Error(InvalidArgument) when a call names more than kMaxKeysPerCall keys.
void check_key_count(std::size_t n);

/// Throws Error(Timeout): "<where>: timed out after X s waiting for keys ...".
[[noreturn]] void throw_wait_timeout(std::string_view where, std::span<const std::string> missing,
                                     Clock::duration waited);

}  // namespace tandem::store
