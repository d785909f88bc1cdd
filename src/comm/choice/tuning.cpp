#include "comm/choice/tuning.hpp"

#include <tandem/error.hpp>
#include <tandem/settings.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

namespace tandem::comm {
namespace {

using Json = nlohmann::json;

constexpr int kFormatVersion = 1;
constexpr std::string_view kFix =
    "fix the file or write a new one with `tandemrun ... tandem-perf --tune --tune-out FILE`";

[[noreturn]] void bad(const std::string& path, std::string_view where, std::string_view what) {
  TANDEM_THROW(ErrorCode::InvalidArgument, "TANDEM_TUNING_FILE={}: {}{}{}; {}", path, where,
               where.empty() ? "" : ": ", what, kFix);
}

std::size_t parse_bound(const Json& v, const std::string& path, const std::string& where,
                        std::string_view field) {
  std::optional<std::uint64_t> bytes;
  if (v.is_number_unsigned()) {
    bytes = v.get<std::uint64_t>();
  } else if (v.is_string()) {
    bytes = settings::parse_bytes(v.get<std::string>());
  }
  if (!bytes)
    bad(path, where,
        fmt::format("'{}' is {}, not a byte count (a number, or a string like \"64K\")", field,
                    v.dump()));
  if (*bytes != 0 && !std::has_single_bit(*bytes))
    bad(path, where,
        fmt::format("'{}' is {}, not 0 or a power of two (the selector chooses per power-of-two "
                    "size class, so a bound inside one would split it)",
                    field, *bytes));
  return static_cast<std::size_t>(*bytes);
}

int parse_count(const Json& ctx, const std::string& path, const std::string& where,
                const char* field) {
  const auto it = ctx.find(field);
  if (it == ctx.end() || !it->is_number_integer() || it->get<long long>() < 1 ||
      it->get<long long>() > (1 << 24))
    bad(path, where, fmt::format("'context.{}' must be a positive integer", field));
  return it->get<int>();
}

TuningContext parse_context(const Json& e, const std::string& path, const std::string& where) {
  const auto it = e.find("context");
  if (it == e.end() || !it->is_object())
    bad(path, where, "no 'context' object (world_size, hosts and transport it was measured with)");
  TuningContext c;
  c.world_size = parse_count(*it, path, where, "world_size");
  c.hosts = parse_count(*it, path, where, "hosts");
  const auto t = it->find("transport");
  if (t == it->end() || !t->is_string() || (*t != "shm" && *t != "tcp" && *t != "shm+tcp"))
    bad(path, where, "'context.transport' must be \"shm\", \"tcp\" or \"shm+tcp\"");
  c.transport = t->get<std::string>();
  if (c.hosts > c.world_size)
    bad(path, where,
        fmt::format("'context.hosts' {} exceeds world_size {}", c.hosts, c.world_size));
  return c;
}

std::vector<TuningRange> parse_ranges(const Json& list, CollectiveKind kind,
                                      const std::string& path, const std::string& where,
                                      const algorithms::Registry& reg) {
  const std::string name(to_string(kind));
  if (!list.is_array())
    bad(path, where, fmt::format("'{}' must be a list of {{from, to, algorithm}}", name));
  std::vector<TuningRange> out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Json& r = list[i];
    const std::string at = fmt::format("{}, {} range {}", where, name, i);
    if (!r.is_object()) bad(path, at, "a range is an object {from, to, algorithm}");
    for (const auto& [key, value] : r.items())
      if (key != "from" && key != "to" && key != "algorithm")
        bad(path, at, fmt::format("unknown field '{}' (a range has from, to, algorithm)", key));
    TuningRange range;
    range.from = r.contains("from") ? parse_bound(r["from"], path, at, "from") : 0;
    if (r.contains("to") && !r["to"].is_null()) {
      range.to = parse_bound(r["to"], path, at, "to");
      if (range.to <= range.from)
        bad(path, at,
            fmt::format("empty range: 'to' {} is not above 'from' {}", range.to, range.from));
    }
    const auto a = r.find("algorithm");
    if (a == r.end() || !a->is_string()) bad(path, at, "no 'algorithm' name");
    range.algorithm = reg.find(kind, a->get<std::string>());
    if (range.algorithm == nullptr)
      bad(path, at,
          fmt::format("{} has no algorithm named '{}' (known: {})", name, a->get<std::string>(),
                      algorithm_names(reg, kind)));
    if (!out.empty()) {
      const TuningRange& prev = out.back();
      if (prev.to == 0 || range.from < prev.to)
        bad(path, at,
            fmt::format("ranges overlap or are not sorted: this one starts at {} before the "
                        "previous one ends at {}; list them by size, each from where the "
                        "last one ends",
                        range.from,
                        prev.to == 0 ? std::string("infinity") : std::to_string(prev.to)));
    }
    out.push_back(range);
  }
  return out;
}

}  // namespace

std::string to_string(const TuningContext& c) {
  return fmt::format("{} rank{} on {} host{} over {}", c.world_size, c.world_size == 1 ? "" : "s",
                     c.hosts, c.hosts == 1 ? "" : "s", c.transport);
}

TuningContext tuning_context(std::span<const std::string> host_ids, int rank,
                             std::span<const transport::Link> links) {
  TuningContext c;
  c.world_size = static_cast<int>(host_ids.size());
  std::vector<std::string_view> hosts;
  bool shm = false;
  bool tcp = false;
  bool alone = true;
  const std::string& mine = host_ids[static_cast<std::size_t>(rank)];
  for (std::size_t r = 0; r < host_ids.size(); ++r) {
    const std::string& host = host_ids[r];
    if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
    if (static_cast<int>(r) == rank) continue;
    if (host == mine) alone = false;
    (links[r] == transport::Link::shm ? shm : tcp) = true;
  }
  c.hosts = static_cast<int>(hosts.size());
  // A rank with no peer on its host cannot see whether the others share memory: it assumes
  // they do (the default) when some host holds several ranks.
  if (alone && c.hosts < c.world_size && !shm) shm = !settings::get_bool("TANDEM_SHM_DISABLE");
  c.transport = shm && tcp ? "shm+tcp" : shm ? "shm" : "tcp";
  return c;
}

TuningContext tuning_context(const transport::Mesh& mesh) {
  std::vector<std::string> ids;
  std::vector<transport::Link> links;
  for (int r = 0; r < mesh.size(); ++r) {
    ids.push_back(mesh.peer_info(r).host_id);
    links.push_back(r == mesh.rank() ? transport::Link::self : mesh.link(r));
  }
  return tuning_context(ids, mesh.rank(), links);
}

const algorithms::Algorithm* TuningEntry::lookup(CollectiveKind kind,
                                                 std::size_t bytes) const noexcept {
  for (const TuningRange& r : ranges[index_of(kind)])
    if (r.covers(bytes)) return r.algorithm;
  return nullptr;
}

std::string TuningEntry::digest() const {
  std::string s = to_string(context);
  for (std::size_t k = 0; k < kKindCount; ++k)
    for (const TuningRange& r : ranges[k])
      s += fmt::format(";{}:{}-{}={}", k, r.from, r.to, r.algorithm->name());
  return s;
}

const TuningEntry* TuningFile::match(const TuningContext& c) const noexcept {
  for (const TuningEntry& e : entries)
    if (e.context == c) return &e;
  return nullptr;
}

TuningFile parse_tuning(std::string_view text, const std::string& path,
                        const algorithms::Registry& reg) {
  Json doc;
  try {
    doc = Json::parse(text);
  } catch (const Json::parse_error& e) {
    bad(path, "", fmt::format("not valid JSON ({})", e.what()));
  }
  if (!doc.is_object()) bad(path, "", "the top level must be an object");
  const auto version = doc.find("tandem_tuning");
  if (version == doc.end() || !version->is_number_integer() || *version != kFormatVersion)
    bad(path, "",
        fmt::format("'tandem_tuning' must be {} (the format version this tandem reads)",
                    kFormatVersion));
  const auto entries = doc.find("entries");
  if (entries == doc.end() || !entries->is_array()) bad(path, "", "no 'entries' list");
  TuningFile file;
  file.path = path;
  for (std::size_t i = 0; i < entries->size(); ++i) {
    const Json& e = (*entries)[i];
    std::string where = fmt::format("entry {}", i);
    if (!e.is_object()) bad(path, where, "an entry is an object {context, collectives}");
    for (const auto& [key, value] : e.items())
      if (key != "context" && key != "collectives" && key != "measurements")
        bad(path, where,
            fmt::format("unknown field '{}' (an entry has context, collectives, measurements)",
                        key));
    TuningEntry entry;
    entry.context = parse_context(e, path, where);
    where = fmt::format("entry {} ({})", i, to_string(entry.context));
    for (const TuningEntry& other : file.entries)
      if (other.context == entry.context)
        bad(path, where, fmt::format("the same context as {}; keep one", other.label));
    const auto colls = e.find("collectives");
    if (colls == e.end() || !colls->is_object()) bad(path, where, "no 'collectives' object");
    for (const auto& [name, list] : colls->items()) {
      const auto kind = parse_collective(name);
      if (!kind || reg.of(*kind).empty())
        bad(path, where,
            fmt::format("unknown collective '{}' (use allreduce, broadcast, reduce, allgather, "
                        "reduce_scatter, ...)",
                        name));
      entry.ranges[index_of(*kind)] = parse_ranges(list, *kind, path, where, reg);
    }
    entry.label = fmt::format("{} of {}", where, path);
    file.entries.push_back(std::move(entry));
  }
  return file;
}

std::shared_ptr<const TuningFile> load_tuning_file(const std::string& path) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const TuningFile>> loaded;
  const std::lock_guard lock(mutex);
  if (auto it = loaded.find(path); it != loaded.end()) return it->second;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "TANDEM_TUNING_FILE={}: cannot open it; check the path (relative paths are "
                 "taken from the working directory of every rank) or unset the variable",
                 path);
  std::ostringstream text;
  text << in.rdbuf();
  auto file = std::make_shared<const TuningFile>(
      parse_tuning(text.str(), path, algorithms::Registry::builtin()));
  loaded.emplace(path, file);
  return file;
}

}  // namespace tandem::comm
