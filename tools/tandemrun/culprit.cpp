#include "culprit.hpp"

#include "tools_api/progress.hpp"

#include <fmt/format.h>

#include <chrono>
#include <optional>

namespace tandem::tools::tandemrun {
namespace {

constexpr std::size_t kMaxErrorChars = 400;
constexpr std::size_t kMaxErrors = 2;

std::optional<std::string> read_key(store::Store& store, const std::string& key) {
  const std::string keys[] = {key};
  if (!store.check(keys)) return std::nullopt;
  return store.get(key, deadline_in(std::chrono::seconds(5)));
}

}  // namespace

std::vector<std::string> collective_report(store::Store& store, int round, int world_size,
                                           const std::vector<NodeReport>& reports) {
  if (world_size <= 0) return {};
  const std::string prefix = fmt::format("tandem/r{}/world/", round);
  const auto n = static_cast<std::size_t>(world_size);
  std::vector<std::optional<tools_api::ProgressRecord>> records(n);
  std::vector<bool> failed_in_tandem(n, false);
  bool any = false;
  for (int r = 0; r < world_size; ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (auto text = read_key(store, prefix + tools_api::flight_key(r))) {
      records[i] = tools_api::decode_progress(*text);
      failed_in_tandem[i] = records[i].has_value();
    }
    if (!records[i]) {
      if (auto text = read_key(store, prefix + tools_api::progress_key(r)))
        records[i] = tools_api::decode_progress(*text);
    }
    if (!records[i]) {  // no collective yet: its address record, if it got as far as setup
      if (auto text = read_key(store, prefix + tools_api::address_key(r)))
        records[i] = tools_api::progress_from_address(*text, r);
    }
    any = any || records[i].has_value();
  }
  if (!any) return {};

  // Ranks that died on their own (not through a tandem error, not stopped by tandemrun):
  // their record is their last report, not the state they died in.
  std::vector<bool> lost(n, false);
  for (const auto& report : reports)
    for (const auto& w : report.workers)
      if (w.rank >= 0 && w.rank < world_size && w.failed_first() &&
          !failed_in_tandem[static_cast<std::size_t>(w.rank)])
        lost[static_cast<std::size_t>(w.rank)] = true;

  std::vector<std::string> lines;
  if (auto what = tools_api::diagnose(records, lost)) {
    lines.push_back(*what);
  } else {
    std::vector<std::string> each;
    for (const auto& r : records)
      if (r) each.push_back(fmt::format("rank {}: {} completed", r->rank, r->done));
    lines.push_back(fmt::format("no rank was inside a collective ({})", fmt::join(each, ", ")));
  }
  std::size_t shown = 0, more = 0;
  for (const auto& r : records) {
    if (!r || r->error.empty()) continue;
    if (shown == kMaxErrors) {
      ++more;
      continue;
    }
    ++shown;
    std::string e = r->error;
    if (e.size() > kMaxErrorChars) e = e.substr(0, kMaxErrorChars) + "...";
    lines.push_back(fmt::format("rank {} reported: {}", r->rank, e));
  }
  if (more > 0) lines.push_back(fmt::format("({} more rank(s) reported errors)", more));
  return lines;
}

}  // namespace tandem::tools::tandemrun
