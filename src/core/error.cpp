#include <tandem/error.hpp>

#include <fmt/format.h>

#include <cstring>

namespace tandem {
namespace {

std::string location(const char* file, int line) {
  if (file == nullptr || *file == '\0') return {};
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  return line > 0 ? fmt::format("{}:{}", base, line) : std::string(base);
}

}  // namespace

std::string_view to_string(ErrorCode c) noexcept {
  switch (c) {
    case ErrorCode::Timeout:
      return "Timeout";
    case ErrorCode::PeerLost:
      return "PeerLost";
    case ErrorCode::InvalidArgument:
      return "InvalidArgument";
    case ErrorCode::Mismatch:
      return "Mismatch";
    case ErrorCode::Aborted:
      return "Aborted";
    case ErrorCode::Io:
      return "Io";
    case ErrorCode::Unauthenticated:
      return "Unauthenticated";
    case ErrorCode::Internal:
      return "Internal";
  }
  return "Unknown";
}

Error::Error(ErrorCode code, std::string message, const char* file, int line)
    : std::runtime_error(fmt::format("[{}] {}", to_string(code), message)),
      code_(code),
      message_(std::move(message)),
      where_(location(file, line)) {}

}  // namespace tandem
