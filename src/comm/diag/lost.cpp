#include "comm/diag/lost.hpp"

#include <algorithm>

namespace tandem::comm {

std::vector<int> ranks_named_lost(std::string_view message, int size) {
  constexpr std::string_view kRank = "rank ";
  constexpr std::string_view kRelay = "reported by ";
  std::vector<int> lost;
  for (std::size_t at = message.find(kRank); at != std::string_view::npos;
       at = message.find(kRank, at + 1)) {
    std::size_t i = at + kRank.size();
    long r = 0;
    const std::size_t digits = i;
    while (i < message.size() && message[i] >= '0' && message[i] <= '9' && r <= size)
      r = r * 10 + (message[i++] - '0');
    if (i == digits || message.substr(i, 7) != " (host ") continue;
    if (at >= kRelay.size() && message.substr(at - kRelay.size(), kRelay.size()) == kRelay)
      continue;
    const int rank = static_cast<int>(r);
    if (r < size && std::find(lost.begin(), lost.end(), rank) == lost.end()) lost.push_back(rank);
  }
  return lost;
}

}  // namespace tandem::comm
