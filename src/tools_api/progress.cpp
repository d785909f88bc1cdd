#include "tools_api/progress.hpp"

#include "comm/diag/monitor.hpp"
#include "comm/diag/progress.hpp"

namespace tandem::tools_api {

std::string progress_key(int rank) {
  return comm::Monitor::progress_key(rank);
}

std::string flight_key(int rank) {
  return comm::Monitor::flight_key(rank);
}

std::string address_key(int rank) {
  return comm::Monitor::address_key(rank);
}

std::optional<ProgressRecord> progress_from_address(std::string_view text, int rank) {
  std::optional<comm::ProgressRecord> r = comm::ProgressRecord::from_address(text, rank);
  if (!r) return std::nullopt;
  return ProgressRecord{r->rank, r->done, {}, r->encode()};
}

std::optional<ProgressRecord> decode_progress(std::string_view text) {
  std::optional<comm::ProgressRecord> r = comm::ProgressRecord::decode(text);
  if (!r) return std::nullopt;
  return ProgressRecord{r->rank, r->done, std::move(r->error), std::string(text)};
}

std::optional<std::string> diagnose(std::span<const std::optional<ProgressRecord>> records,
                                    const std::vector<bool>& lost) {
  std::vector<std::optional<comm::ProgressRecord>> decoded;
  decoded.reserve(records.size());
  for (const auto& r : records)
    decoded.push_back(r ? comm::ProgressRecord::decode(r->text) : std::nullopt);
  return comm::diagnose(decoded, lost);
}

}  // namespace tandem::tools_api
