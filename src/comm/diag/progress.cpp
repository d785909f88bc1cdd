#include "comm/diag/progress.hpp"

#include "comm/setup/bootstrap.hpp"
#include "transport/bootstrap.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <ctime>
#include <map>
#include <tuple>

namespace tandem::comm {
namespace {

template <class T>
bool parse_number(std::string_view s, T* out) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string one_line(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) out += (c == '\n' || c == '\r') ? ' ' : c;
  return out;
}

// "allreduce (f32 x 1000)", with " #12" after the name when `seq` is given.
std::string call_text(const ProgressRecord& r, std::optional<std::uint64_t> seq = {}) {
  const std::string name =
      seq ? fmt::format("{} #{}", to_string(r.kind), *seq) : std::string(to_string(r.kind));
  switch (r.kind) {
    case CollectiveKind::barrier:
      return name;
    case CollectiveKind::broadcast:
    case CollectiveKind::reduce:
    case CollectiveKind::gather:
    case CollectiveKind::scatter:
      return fmt::format("{} ({} x {}, root {})", name, to_string(r.dtype), r.count, r.root);
    default:
      return fmt::format("{} ({} x {})", name, to_string(r.dtype), r.count);
  }
}

std::string ranks_text(const std::vector<int>& ranks) {
  return fmt::format("rank{} {}", ranks.size() > 1 ? "s" : "", format_ranks(ranks));
}

}  // namespace

std::string ProgressRecord::current() const {
  return entered == 0 ? std::string("no collective") : call_text(*this, entered - 1);
}

std::string ProgressRecord::encode() const {
  std::string s = fmt::format(
      "tandem-progress=1\nrank={}\nhost={}\npid={}\nentered={}\ndone={}\nop={}\ndtype={}\n"
      "count={}\nroot={}\nsince_ms={}\n",
      rank, one_line(host), pid, entered, done, to_string(kind), to_string(dtype), count, root,
      since_ms);
  if (!error.empty()) s += fmt::format("error={}\n", one_line(error));
  for (const auto& line : recent) s += fmt::format("recent={}\n", one_line(line));
  return s;
}

std::optional<ProgressRecord> ProgressRecord::from_address(std::string_view text, int rank) {
  try {
    const transport::RankRecord a = transport::decode_record(text, rank);
    ProgressRecord r;
    r.rank = rank;
    r.host = a.info.host;
    r.pid = a.info.pid;
    return r;
  } catch (const Error&) {
    return std::nullopt;  // another build's record
  }
}

std::optional<ProgressRecord> ProgressRecord::decode(std::string_view text) {
  if (!text.starts_with("tandem-progress=1\n")) return std::nullopt;
  ProgressRecord r;
  bool have_rank = false, have_entered = false, have_done = false;
  while (!text.empty()) {
    const auto eol = text.find('\n');
    const std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    const auto eq = line.find('=');
    if (eq == std::string_view::npos) return std::nullopt;
    const std::string_view key = line.substr(0, eq), value = line.substr(eq + 1);
    bool ok = true;
    if (key == "rank") {
      ok = have_rank = parse_number(value, &r.rank);
    } else if (key == "host") {
      r.host = value;
    } else if (key == "pid") {
      ok = parse_number(value, &r.pid);
    } else if (key == "entered") {
      ok = have_entered = parse_number(value, &r.entered);
    } else if (key == "done") {
      ok = have_done = parse_number(value, &r.done);
    } else if (key == "op") {
      const auto k = parse_collective(value);
      ok = k.has_value();
      if (ok) r.kind = *k;
    } else if (key == "dtype") {
      const auto d = parse_dtype(value);
      ok = d.has_value();
      if (ok) r.dtype = *d;
    } else if (key == "count") {
      ok = parse_number(value, &r.count);
    } else if (key == "root") {
      ok = parse_number(value, &r.root);
    } else if (key == "since_ms") {
      ok = parse_number(value, &r.since_ms);
    } else if (key == "error") {
      r.error = value;
    } else if (key == "recent") {
      r.recent.emplace_back(value);
    }
    if (!ok) return std::nullopt;
  }
  if (!have_rank || !have_entered || !have_done || r.done > r.entered) return std::nullopt;
  return r;
}

std::string format_wall_ms(std::int64_t ms) {
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  localtime_r(&secs, &tm);
  return fmt::format("{:02}:{:02}:{:02}.{:03}", tm.tm_hour, tm.tm_min, tm.tm_sec, ms % 1000);
}

std::optional<std::string> diagnose(std::span<const std::optional<ProgressRecord>> records,
                                    const std::vector<bool>& lost, bool* disagree) {
  if (disagree != nullptr) *disagree = false;
  const auto is_lost = [&](std::size_t r) { return r < lost.size() && lost[r]; };
  // The collective the job is stuck in: the latest one any rank is inside.
  const ProgressRecord* ref = nullptr;
  for (std::size_t r = 0; r < records.size(); ++r) {
    const auto& rec = records[r];
    if (!rec || !rec->inside()) continue;
    if (ref == nullptr || rec->entered > ref->entered ||
        (rec->entered == ref->entered && is_lost(static_cast<std::size_t>(ref->rank)) &&
         !is_lost(r)))
      ref = &*rec;
  }
  if (ref == nullptr) return std::nullopt;
  const std::uint64_t seq = ref->entered - 1;

  // Ranks inside it, grouped by the call they made (more than one group: a mismatch).
  std::map<std::string, std::vector<int>> calls;
  std::int64_t since = 0;
  std::vector<int> completed, silent, lost_ranks;
  std::map<std::uint64_t, std::vector<int>> never;  // by collectives completed
  std::vector<std::string> elsewhere;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const int r = static_cast<int>(i);
    if (is_lost(i)) lost_ranks.push_back(r);
    const auto& rec = records[i];
    if (!rec) {
      silent.push_back(r);
    } else if (rec->inside() && rec->entered - 1 == seq) {
      calls[call_text(*rec)].push_back(r);
      if (since == 0 || rec->since_ms < since) since = rec->since_ms;
    } else if (rec->done > seq) {
      completed.push_back(r);
    } else if (rec->inside()) {
      elsewhere.push_back(fmt::format("rank {} is still in {} since {}", r, rec->current(),
                                      format_wall_ms(rec->since_ms)));
    } else {
      never[rec->done].push_back(r);
    }
  }

  std::vector<std::string> parts;
  if (calls.size() == 1) {
    parts.push_back(fmt::format("{}: {} waiting in it since {}", ref->current(),
                                ranks_text(calls.begin()->second), format_wall_ms(since)));
  } else {
    if (disagree != nullptr) *disagree = true;
    std::vector<std::string> each;
    for (const auto& [call, ranks] : calls)
      each.push_back(fmt::format("{} called {}", ranks_text(ranks), call));
    parts.push_back(
        fmt::format("collective #{}: the ranks disagree: {}", seq, fmt::join(each, "; ")));
  }
  for (const auto& [done, ranks] : never) {
    parts.push_back(fmt::format("{} never entered it ({})", ranks_text(ranks),
                                done == 0 ? std::string("completed no collective")
                                          : fmt::format("last completed #{}", done - 1)));
  }
  for (auto& e : elsewhere) parts.push_back(std::move(e));
  if (!completed.empty()) parts.push_back(fmt::format("{} completed it", ranks_text(completed)));
  if (!silent.empty())
    parts.push_back(fmt::format("{} reported no progress (never created the communicator?)",
                                ranks_text(silent)));
  if (!lost_ranks.empty())
    parts.push_back(
        fmt::format("{} died: the state shown is their last report (reports are "
                    "half a second apart)",
                    ranks_text(lost_ranks)));
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace tandem::comm
