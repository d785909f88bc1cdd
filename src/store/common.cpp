#include "store/common.hpp"

#include <tandem/error.hpp>

#include <charconv>
#include <chrono>

namespace tandem::store {

Deadline deadline_after_ms(std::int64_t ms) noexcept {
  // 100 years: beyond any job; also far below the nanosecond overflow of the clock.
  constexpr std::int64_t kForeverMs = 100LL * 365 * 24 * 3600 * 1000;
  if (ms < 0 || ms >= kForeverMs) return Deadline::max();
  return deadline_in(std::chrono::milliseconds(ms));
}

std::optional<std::int64_t> parse_int(std::string_view text) noexcept {
  std::int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end) return std::nullopt;
  return v;
}

std::string add_value(std::string_view key, const std::optional<std::string_view>& current,
                      std::int64_t delta, std::int64_t* result) {
  std::int64_t base = 0;
  if (current) {
    const auto parsed = parse_int(*current);
    if (!parsed)
      TANDEM_THROW(ErrorCode::InvalidArgument,
                   "add({}, {}): the key holds {} bytes that are not a decimal integer; add() "
                   "only works on keys written by add() or set to an integer",
                   printable(key), delta, current->size());
    base = *parsed;
  }
  std::int64_t sum = 0;
  if (__builtin_add_overflow(base, delta, &sum))
    TANDEM_THROW(ErrorCode::InvalidArgument, "add({}, {}): {} + {} overflows int64", printable(key),
                 delta, base, delta);
  *result = sum;
  return std::to_string(sum);
}

std::string printable(std::string_view key) {
  constexpr std::size_t kMaxShown = 200;
  std::string out = "'";
  const std::size_t n = std::min(key.size(), kMaxShown);
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(key[i]);
    if (c == '\\' || c == '\'') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  out += '\'';
  if (key.size() > kMaxShown) out += fmt::format("... ({} bytes)", key.size());
  return out;
}

std::string describe_keys(std::span<const std::string> keys, std::size_t max_named) {
  std::string out;
  const std::size_t n = std::min(keys.size(), max_named);
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) out += ", ";
    out += printable(keys[i]);
  }
  if (keys.size() > n) out += fmt::format(" and {} more", keys.size() - n);
  return out;
}

void check_key(std::string_view key) {
  if (key.size() > kMaxKeyBytes)
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "store key {} is {} bytes; keys are limited to {} bytes", printable(key),
                 key.size(), kMaxKeyBytes);
}

void check_key_count(std::size_t n) {
  if (n > kMaxKeysPerCall)
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "a store wait/check names {} keys; at most {} per call (split the call)", n,
                 kMaxKeysPerCall);
}

void throw_wait_timeout(std::string_view where, std::span<const std::string> missing,
                        Clock::duration waited) {
  const double s = std::chrono::duration<double>(waited).count();
  TANDEM_THROW(ErrorCode::Timeout,
               "{}: timed out after {:.1f} s waiting for {} key{}: {} (did every rank start, and "
               "with the same world size? raise TANDEM_TIMEOUT if startup is slow)",
               where, s, missing.size(), missing.size() == 1 ? "" : "s", describe_keys(missing));
}

}  // namespace tandem::store
