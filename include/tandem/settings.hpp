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

/// Raw value from the environment, or the declared default when unset or empty.
std::string get_string(std::string_view name);
/// 1/0, true/false, yes/no, on/off (case-insensitive).
bool get_bool(std::string_view name);
std::int64_t get_int(std::string_view name);
/// Seconds, fractions allowed ("0.5", "600").
std::chrono::nanoseconds get_seconds(std::string_view name);
/// Byte counts with optional K/M/G suffixes (binary: 4M = 4 MiB).
std::uint64_t get_bytes(std::string_view name);

/// Parses "4M", "128K", "1G", "100" into bytes; nullopt when malformed.
std::optional<std::uint64_t> parse_bytes(std::string_view text) noexcept;

}  // namespace tandem::settings
