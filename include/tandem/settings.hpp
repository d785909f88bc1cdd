#pragma once
/// @file settings.hpp
/// Every TANDEM_* environment variable is declared once, in one table, with its
/// type, default and description. The README's settings table is checked against
/// this table by a test, so the two cannot drift apart.

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace tandem::settings {

enum class Type : std::uint8_t { boolean, integer, seconds, bytes, string, choice };

struct Setting {
  std::string_view name;           ///< "TANDEM_TIMEOUT"
  Type type;                       ///< how the value is parsed
  std::string_view default_value;  ///< as a user would write it ("600", "4M", "")
  std::string_view description;    ///< one sentence for the README table
};

/// The whole table, sorted by name.
std::span<const Setting> all() noexcept;

/// The declared entry for `name`; throws Error(Internal) for an undeclared name,
/// so code cannot read a setting that the README does not document.
const Setting& find(std::string_view name);

// The getters below read the variable (or its default when unset or empty), and throw
// Error(InvalidArgument) naming the variable, its value and an example of a valid value when
// the value does not parse, e.g.
//   TANDEM_TIMEOUT='abc' is not a number of seconds (example: TANDEM_TIMEOUT=600); fix or unset it
// They throw Error(Internal) for a name that is not in the table. Ranges are the caller's to
// check (a negative TANDEM_SPIN_US parses).

/// Raw value from the environment, or the declared default when unset or empty.
std::string get_string(std::string_view name);
/// 1/0, true/false, yes/no, on/off (case-insensitive, surrounding blanks ignored).
bool get_bool(std::string_view name);
/// A decimal integer, optionally signed ("50", "-1", "+3"); fits in 64 bits.
std::int64_t get_int(std::string_view name);
/// Non-negative seconds, fractions and exponents allowed, optional "s" suffix ("0.5", "600",
/// "30s", "1e3"). Values beyond the range of nanoseconds saturate to nanoseconds::max().
std::chrono::nanoseconds get_seconds(std::string_view name);
/// Byte counts, see parse_bytes().
std::uint64_t get_bytes(std::string_view name);

/// Parses a byte count: a decimal number with an optional binary suffix K, M, G or T
/// (case-insensitive; 4M = 4 MiB = 4194304), optionally followed by "B" or "iB" ("4MB",
/// "4MiB"); a bare "B" means bytes ("64B"). A fraction is allowed with a suffix and rounds
/// down to whole bytes ("1.5M" = 1572864, "0.3K" = 307), not without one ("1.5" is
/// malformed). Surrounding blanks are ignored. nullopt when malformed, negative or > 2^64-1.
std::optional<std::uint64_t> parse_bytes(std::string_view text) noexcept;

}  // namespace tandem::settings
