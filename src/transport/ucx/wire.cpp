#include "transport/ucx/wire.hpp"

#include <fmt/format.h>

#include <regex>
#include <vector>

namespace tandem::transport::ucx {

std::string to_hex(std::string_view bytes) {
  std::string out;
  out.reserve(2 * bytes.size());
  for (unsigned char c : bytes) out += fmt::format("{:02x}", c);
  return out;
}

std::optional<std::string> from_hex(std::string_view hex) {
  if (hex.size() % 2 != 0 || hex.size() > 2 * kMaxAddressBytes) return std::nullopt;
  const auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out(hex.size() / 2, '\0');
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int hi = digit(hex[2 * i]);
    const int lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<char>(hi << 4 | lo);
  }
  return out;
}

std::string summarize_lanes(std::string_view ep_info) {
  // "#   lane[0]:  2:tcp/tdm0.0 md[1]          -> md[1]/tcp/sysdev[255] am am_bw#0"
  static const std::regex kLane(R"(lane\[\d+\]:\s+\d+:([A-Za-z0-9_]+)/([^\s.]+))");
  std::vector<std::string> seen;
  const std::string text(ep_info);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kLane);
       it != std::sregex_iterator(); ++it) {
    std::string lane = (*it)[1].str() + "/" + (*it)[2].str();
    bool dup = false;
    for (const auto& s : seen) dup = dup || s == lane;
    if (!dup) seen.push_back(std::move(lane));
  }
  std::string out;
  for (const auto& s : seen) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace tandem::transport::ucx
