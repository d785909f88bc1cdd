#pragma once
/// @file error.hpp
/// The one error type of tandem. Every failure that reaches the API is a
/// tandem::Error with a code and a message that says what happened, which
/// collective / peer / address was involved, and what to do next.

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace tandem {

enum class ErrorCode {
  Timeout,          ///< a deadline passed (TANDEM_TIMEOUT or an explicit one)
  PeerLost,         ///< a peer process died or closed its connection
  InvalidArgument,  ///< the caller passed something unusable
  Mismatch,         ///< ranks called different collectives, sizes or types
  Aborted,          ///< the communicator was aborted (by this rank or a peer)
  Io,               ///< an operating-system or network operation failed
  Unauthenticated,  ///< a peer or store client presented a wrong token
  Internal,         ///< a bug in tandem: please report it
};

std::string_view to_string(ErrorCode c) noexcept;

/// The exception thrown by every tandem API.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string message, const char* file = nullptr, int line = 0);

  ErrorCode code() const noexcept { return code_; }
  /// The message without the "[Code] " prefix that what() carries.
  const std::string& message() const noexcept { return message_; }
  /// Source location that raised the error ("file.cpp:123"), empty if unknown.
  const std::string& where() const noexcept { return where_; }

 private:
  ErrorCode code_;
  std::string message_;
  std::string where_;
};

}  // namespace tandem

/// Throws tandem::Error(code, fmt::format(...)) tagged with file:line.
#define TANDEM_THROW(code, ...) \
  throw ::tandem::Error((code), ::fmt::format(__VA_ARGS__), __FILE__, __LINE__)

/// Invariant check: throws ErrorCode::Internal with the formatted message when `cond` is false.
#define TANDEM_CHECK(cond, ...)                                                                 \
  do {                                                                                          \
    if (!(cond)) [[unlikely]]                                                                   \
      throw ::tandem::Error(::tandem::ErrorCode::Internal,                                      \
                            "check failed: " #cond ": " + ::fmt::format(__VA_ARGS__), __FILE__, \
                            __LINE__);                                                          \
  } while (0)

/// Argument check: throws ErrorCode::InvalidArgument when `cond` is false.
#define TANDEM_CHECK_ARG(cond, ...)                                                           \
  do {                                                                                        \
    if (!(cond)) [[unlikely]]                                                                 \
      throw ::tandem::Error(::tandem::ErrorCode::InvalidArgument, ::fmt::format(__VA_ARGS__), \
                            __FILE__, __LINE__);                                              \
  } while (0)
