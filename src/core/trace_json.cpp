// The timeline's JSON: rendering a ring's events, and merging the ranks' part files. A part
// is written one trace event per line between a fixed first and last line, so merging needs
// no JSON parser: it concatenates the event lines of every part.

#include "core/trace.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <limits>
#include <optional>
#include <unistd.h>

namespace tandem::core::trace {

namespace {

// Microseconds with nanosecond digits, exact ("1700000000123456.789").
std::string format_us(std::int64_t ns) {
  if (ns < 0) return fmt::format("-{}", format_us(-ns));
  return fmt::format("{}.{:03}", ns / 1000, ns % 1000);
}

// Length of the valid UTF-8 sequence at the start of `s`, or 0.
std::size_t utf8_length(std::string_view s) noexcept {
  const auto b0 = static_cast<unsigned char>(s[0]);
  std::size_t n = 0;
  std::uint32_t cp = 0;
  if (b0 < 0x80) return 1;
  if ((b0 & 0xe0) == 0xc0) {
    n = 2;
    cp = b0 & 0x1f;
  } else if ((b0 & 0xf0) == 0xe0) {
    n = 3;
    cp = b0 & 0x0f;
  } else if ((b0 & 0xf8) == 0xf0) {
    n = 4;
    cp = b0 & 0x07;
  } else {
    return 0;
  }
  if (s.size() < n) return 0;
  for (std::size_t i = 1; i < n; ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if ((b & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3f);
  }
  const std::uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

std::string span_id(int pid, int tid, std::uint64_t index) {
  return fmt::format(R"("0x{:x}")", (static_cast<std::uint64_t>(pid) << 48) ^
                                        (static_cast<std::uint64_t>(tid) << 32) ^ index);
}

}  // namespace

std::string json_quote(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '"';
  while (!text.empty()) {
    const char c = text.front();
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\u{:04x}", u);
    } else if (u >= 0x80) {
      const std::size_t n = utf8_length(text);
      if (n == 0) {
        out += "\\ufffd";  // not UTF-8: JSON readers would reject the whole file
        text.remove_prefix(1);
      } else {
        out.append(text.substr(0, n));
        text.remove_prefix(n);
      }
      continue;
    } else {
      out += c;
    }
    text.remove_prefix(1);
  }
  out += '"';
  return out;
}

void Ring::render(std::vector<std::string>& out, std::vector<std::string>& metadata) const {
  const std::uint64_t head = published_.load(std::memory_order_acquire);
  const std::uint64_t lo = head > capacity_ ? head - capacity_ : 0;
  std::vector<Event> copy;
  copy.reserve(static_cast<std::size_t>(head - lo));
  for (std::uint64_t i = lo; i < head; ++i)
    copy.push_back(events_[static_cast<std::size_t>(i % slots_)]);
  // The writer may have gone on meanwhile: the slots it reused (and the one it may be filling
  // now) are dropped before anything in them is read.
  const std::uint64_t after = published_.load(std::memory_order_acquire);
  const std::uint64_t valid_from = after + 1 > slots_ ? after + 1 - slots_ : 0;
  // The operation running now (written from another thread, by a stop signal): kept only if
  // it was still open, and not committed, after it was copied.
  bool running = false;
  if (open_.load(std::memory_order_acquire)) {
    Event e = events_[static_cast<std::size_t>(after % slots_)];
    if (open_.load(std::memory_order_acquire) &&
        published_.load(std::memory_order_acquire) == after) {
      e.end = Clock::now();
      if (e.nargs < Event::kMaxArgs) e.add_flag("unfinished", true);
      copy.push_back(e);
      running = true;
    }
  }
  std::vector<std::string> errors;
  std::vector<std::string> lanes;
  std::size_t errors_dropped = 0;
  {
    std::lock_guard lock(mutex_);
    errors = errors_;
    errors_dropped = errors_dropped_;
    lanes = lanes_;
  }
  for (std::size_t lane = 0; lane < lanes.size(); ++lane) {
    if (lanes[lane].empty()) continue;
    const int tid = tid_base_ + static_cast<int>(lane);
    metadata.push_back(
        fmt::format(R"({{"name":"thread_name","ph":"M","pid":{},"tid":{},"args":{{"name":{}}}}})",
                    pid_, tid, json_quote(lanes[lane])));
    metadata.push_back(fmt::format(
        R"({{"name":"thread_sort_index","ph":"M","pid":{},"tid":{},"args":{{"sort_index":{}}}}})",
        pid_, tid, tid));
  }
  for (std::size_t k = 0; k < copy.size(); ++k) {
    const std::uint64_t index = lo + k;
    if (index < valid_from && !(running && k + 1 == copy.size())) continue;
    const Event& e = copy[k];
    const int tid = tid_base_ + e.lane;
    std::string name(e.label);
    if (e.number >= 0) name += fmt::format(" #{}", e.number);
    const std::string qname = json_quote(name);
    const std::int64_t ts = sink_.wall_ns(e.start);
    const std::int64_t dur = std::max<std::int64_t>(
        0, std::chrono::duration_cast<std::chrono::nanoseconds>(e.end - e.start).count());
    std::string args;
    for (std::size_t a = 0; a < e.nargs && a < Event::kMaxArgs; ++a) {
      const Arg& arg = e.args[a];
      args += args.empty() ? "" : ",";
      args += json_quote(arg.key);
      args += ':';
      switch (arg.type) {
        case Arg::Type::integer:
          args += fmt::format("{}", arg.number);
          break;
        case Arg::Type::text:
          args += json_quote(arg.text);
          break;
        case Arg::Type::boolean:
          args += arg.number != 0 ? "true" : "false";
          break;
      }
    }
    const bool queued = e.queued != Clock::time_point{} && e.queued < e.start;
    if (queued) {
      const auto q = std::chrono::duration_cast<std::chrono::nanoseconds>(e.start - e.queued);
      args += fmt::format(R"({}"queued_us":{})", args.empty() ? "" : ",", format_us(q.count()));
    }
    if (e.error > errors_dropped && e.error - errors_dropped <= errors.size())
      args += fmt::format(R"({}"error":{})", args.empty() ? "" : ",",
                          json_quote(errors[e.error - errors_dropped - 1]));
    const std::string where = fmt::format(R"("pid":{},"tid":{})", pid_, tid);
    if (e.shape == Event::Shape::complete) {
      out.push_back(
          fmt::format(R"({{"name":{},"cat":"{}","ph":"X","ts":{},"dur":{},{},"args":{{{}}}}})",
                      qname, e.category, format_us(ts), format_us(dur), where, args));
    } else {
      const std::string id = span_id(pid_, tid, 2 * index);
      out.push_back(
          fmt::format(R"({{"name":{},"cat":"{}","ph":"b","id":{},"ts":{},{},"args":{{{}}}}})",
                      qname, e.category, id, format_us(ts), where, args));
      out.push_back(fmt::format(R"({{"name":{},"cat":"{}","ph":"e","id":{},"ts":{},{}}})", qname,
                                e.category, id, format_us(ts + dur), where));
    }
    if (queued) {
      const std::string qn = json_quote(name + " queued");
      const std::string id = span_id(pid_, tid, 2 * index + 1);
      out.push_back(fmt::format(R"({{"name":{},"cat":"queue","ph":"b","id":{},"ts":{},{}}})", qn,
                                id, format_us(sink_.wall_ns(e.queued)), where));
      out.push_back(fmt::format(R"({{"name":{},"cat":"queue","ph":"e","id":{},"ts":{},{}}})", qn,
                                id, format_us(ts), where));
    }
  }
}

// ---- merging ---------------------------------------------------------------------------------

std::vector<std::filesystem::path> find_parts(const std::filesystem::path& file) {
  struct Part {
    int order;  // ranks first, then parts named by pid
    long number;
    std::filesystem::path path;
  };
  std::vector<Part> parts;
  const auto dir = file.parent_path().empty() ? std::filesystem::path(".") : file.parent_path();
  const std::string base = file.filename().string();
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    // The merged file itself (and anything shorter than "<base>.json") is not a part.
    if (name.size() < base.size() + 5 || !name.starts_with(base) || !name.ends_with(".json"))
      continue;
    std::string_view rest = std::string_view(name).substr(base.size());
    rest.remove_suffix(5);
    int order = 0;
    if (rest.starts_with(".rank")) {
      rest.remove_prefix(5);
    } else if (rest.starts_with(".pid")) {
      rest.remove_prefix(4);
      order = 1;
    } else {
      continue;
    }
    long n = 0;
    const auto [end, err] = std::from_chars(rest.data(), rest.data() + rest.size(), n);
    if (err != std::errc{} || end != rest.data() + rest.size() || rest.empty()) continue;
    parts.push_back({order, n, entry.path()});
  }
  std::sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) {
    return a.order != b.order ? a.order < b.order : a.number < b.number;
  });
  std::vector<std::filesystem::path> out;
  for (auto& p : parts) out.push_back(std::move(p.path));
  return out;
}

namespace {

// The "ts" of an event line: where its digits are, and its value in ns.
struct Timestamp {
  std::size_t begin = 0, end = 0;
  std::int64_t ns = 0;
};

std::optional<Timestamp> find_ts(std::string_view line) {
  constexpr std::string_view key = R"("ts":)";
  const auto at = line.find(key);
  if (at == std::string_view::npos) return std::nullopt;
  Timestamp t;
  t.begin = at + key.size();
  std::int64_t us = 0;
  const char* p = line.data() + t.begin;
  const char* last = line.data() + line.size();
  const auto [dot, e1] = std::from_chars(p, last, us);
  if (e1 != std::errc{} || dot == last || *dot != '.' || us < 0) return std::nullopt;
  std::int64_t frac = 0;
  const auto [end, e2] = std::from_chars(dot + 1, last, frac);
  if (e2 != std::errc{} || end - dot != 4) return std::nullopt;
  t.end = static_cast<std::size_t>(end - line.data());
  t.ns = us * 1000 + frac;
  return t;
}

}  // namespace

std::size_t merge_parts(const std::filesystem::path& file, bool remove_parts) {
  const auto parts = find_parts(file);
  if (parts.empty()) return 0;
  std::vector<std::string> events;
  for (const auto& part : parts) {
    std::ifstream in(part, std::ios::binary);
    if (!in) TANDEM_THROW(ErrorCode::Io, "timeline: cannot read the trace part {}", part.string());
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(std::move(line));
    while (!lines.empty() && lines.back().empty()) lines.pop_back();
    if (lines.size() < 2 || lines.front() != kPartHeader || lines.back() != kPartFooter) {
      TANDEM_THROW(ErrorCode::Io,
                   "timeline: {} is not a trace part written by tandem (or it is truncated); "
                   "move it away and merge again",
                   part.string());
    }
    for (std::size_t i = 1; i + 1 < lines.size(); ++i) {
      std::string& l = lines[i];
      if (l.ends_with(',')) l.pop_back();
      if (!l.empty()) events.push_back(std::move(l));
    }
  }
  // Wall-clock microseconds since 1970 need 16 digits, more than a double (what trace viewers
  // parse) holds exactly: the merged file counts from the job's first event instead.
  std::int64_t base = std::numeric_limits<std::int64_t>::max();
  for (const auto& l : events)
    if (const auto t = find_ts(l)) base = std::min(base, t->ns);
  if (base == std::numeric_limits<std::int64_t>::max()) base = 0;
  std::string merged(kPartHeader);
  merged += '\n';
  for (std::size_t i = 0; i < events.size(); ++i) {
    std::string_view l = events[i];
    if (const auto t = find_ts(l)) {
      merged.append(l.substr(0, t->begin));
      merged += format_us(t->ns - base);
      merged.append(l.substr(t->end));
    } else {
      merged.append(l);
    }
    merged += i + 1 < events.size() ? ",\n" : "\n";
  }
  // Where the merged clock starts: wall-clock microseconds since 1970.
  merged += fmt::format(R"(],"displayTimeUnit":"ms","otherData":{{"ts_base_unix_us":"{}"}}}})",
                        format_us(base));
  merged += '\n';
  auto tmp = file;
  tmp += fmt::format(".tmp{}", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << merged;
    out.flush();
    if (!out) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      TANDEM_THROW(ErrorCode::Io, "timeline: cannot write {} (disk full? directory writable?)",
                   tmp.string());
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, file, ec);
  if (ec)
    TANDEM_THROW(ErrorCode::Io, "timeline: cannot rename {} to {}: {}", tmp.string(), file.string(),
                 ec.message());
  if (remove_parts) {
    for (const auto& part : parts) std::filesystem::remove(part, ec);
    // Temporary files of ranks killed while they wrote their part.
    const auto dir = file.parent_path().empty() ? std::filesystem::path(".") : file.parent_path();
    const std::string stem = file.filename().string();
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.find(".json.tmp") != std::string::npos &&
          (name.starts_with(stem + ".rank") || name.starts_with(stem + ".pid")))
        std::filesystem::remove(entry.path(), ec);
    }
  }
  return parts.size();
}

}  // namespace tandem::core::trace
