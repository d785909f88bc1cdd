#include "tune.hpp"

#include "runner.hpp"
#include "tools_api/net.hpp"
#include "tools_api/tuning.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#ifndef TANDEM_PERF_VERSION
#define TANDEM_PERF_VERSION "unknown"
#endif

namespace tandem::tools::perf {
namespace {

using Json = nlohmann::ordered_json;  // keys in the order written

constexpr int kRounds = 3;

/// Whether `b` is timed in place: a broadcast is, as every program calls it (MPI_Bcast and
/// torch.distributed.broadcast have one buffer; DDP broadcasts its parameters in place), and
/// where its algorithms differ most (the one-copy root writes part of the data itself only in
/// place; docs/tuning.md). The others out of place, as nccl-tests reports them.
bool tuned_in_place(Bench b) noexcept {
  return b == Bench::broadcast;
}

constexpr Bench kTunable[] = {Bench::allreduce, Bench::broadcast, Bench::reduce, Bench::allgather,
                              Bench::reduce_scatter};

/// One measured size of one collective.
struct Point {
  std::size_t bytes = 0;       ///< the call's bytes as the selector counts them
  std::vector<double> p50_us;  ///< per algorithm; NaN where it does not apply
  std::size_t fallback = 0;    ///< the built-in choice (index into the algorithms)
  std::size_t chosen = 0;
};

struct Result {
  Bench bench = Bench::allreduce;
  std::vector<std::string> algorithms;  ///< by name
  std::vector<Point> points;
  std::size_t wrong = 0;
};

Result measure(Communicator& comm, const PerfOptions& base, Bench bench) {
  const CollectiveKind kind = kind_of(bench);
  const int world = comm.size();
  Result res;
  res.bench = bench;
  res.algorithms = tools_api::algorithm_names(kind);
  PerfOptions o = base;
  o.bench = bench;
  o.in_place = tuned_in_place(bench);
  o.out_of_place = !o.in_place;
  o.algorithm.clear();
  Runner runner(comm, o);
  const DataType dtype = o.dtypes.front();
  const ReduceOp op = o.ops.front();
  for (std::size_t size = std::bit_ceil(std::max<std::size_t>(o.min_bytes, 1));
       size != 0 && size <= o.max_bytes; size *= 2) {
    Point p;
    p.bytes = runner.call_bytes(size, dtype);
    if (p.bytes == 0) continue;  // no element per rank
    const std::string builtin = tools_api::builtin_algorithm(kind, p.bytes, world);
    p.p50_us.assign(res.algorithms.size(), std::numeric_limits<double>::quiet_NaN());
    // Rounds interleave the algorithms, so that a burst of load on a shared machine
    // slows all of them rather than one: each round's median, then the median of those.
    std::vector<std::vector<double>> rounds(res.algorithms.size());
    for (int round = 0; round < kRounds; ++round) {
      for (std::size_t i = 0; i < res.algorithms.size(); ++i) {
        const std::string& a = res.algorithms[i];
        if (round == 0 && a == builtin) p.fallback = i;
        if (!tools_api::algorithm_supports(kind, a, p.bytes, world)) continue;
        runner.set_algorithm(a);
        const Row row = runner.run(size, dtype, op);
        const Measurement& m = o.in_place ? row.in_place : row.out_of_place;
        res.wrong += m.wrong;
        // A candidate that handed the call on (a direct algorithm, buffers not registered)
        // timed another algorithm: it may stay the built-in choice, not replace it.
        if (m.algorithm != a && a != builtin) continue;
        rounds[i].push_back(m.p50_us);
      }
    }
    for (std::size_t i = 0; i < rounds.size(); ++i) {
      if (rounds[i].empty()) continue;
      std::sort(rounds[i].begin(), rounds[i].end());
      p.p50_us[i] = rounds[i][rounds[i].size() / 2];
    }
    res.points.push_back(std::move(p));
  }
  return res;
}

/// Per size: the fastest algorithm where it beats the built-in choice by more than `margin`.
/// Then a choice that leaves the built-in one must hold for two neighbouring sizes at least:
/// a win at a single size goes back to the built-in choice (noise flips single sizes; a real
/// crossover holds from there on).
void choose(Result& res, double margin) {
  for (Point& p : res.points) {
    p.chosen = p.fallback;
    const double base = p.p50_us[p.fallback];
    for (std::size_t i = 0; i < p.p50_us.size(); ++i) {
      const double t = p.p50_us[i];
      if (std::isnan(t)) continue;
      const double best = p.p50_us[p.chosen];
      if (std::isnan(base) || (t * (1 + margin) < base && t < best)) p.chosen = i;
    }
  }
  const std::size_t n = res.points.size();
  std::vector<std::size_t> first(n);
  for (std::size_t k = 0; k < n; ++k) first[k] = res.points[k].chosen;
  for (std::size_t k = 0; k < n && n > 1; ++k) {
    Point& p = res.points[k];
    const bool held =
        (k > 0 && first[k - 1] == first[k]) || (k + 1 < n && first[k + 1] == first[k]);
    if (!held && !std::isnan(p.p50_us[p.fallback])) p.chosen = p.fallback;
  }
}

struct Range {
  std::size_t from = 0, to = 0;  // to 0: unbounded
  std::string_view algorithm;
};

/// Consecutive sizes with one choice merged; the first range reaches down to 0 and the last
/// one up without bound (the smallest and largest sizes measured speak for those beyond).
std::vector<Range> ranges_of(const Result& res) {
  std::vector<Range> out;
  for (const Point& p : res.points) {
    const std::string_view name = res.algorithms[p.chosen];
    const std::size_t from = out.empty() ? 0 : std::bit_floor(p.bytes);
    if (!out.empty() && out.back().algorithm == name) continue;
    if (!out.empty()) out.back().to = from;
    out.push_back({from, 0, name});
  }
  return out;
}

std::string describe(const std::vector<Range>& ranges) {
  std::string s;
  for (const Range& r : ranges) {
    if (!s.empty()) s += ", ";
    if (r.to == 0)
      s += fmt::format("{}+ {}", tools_api::format_bytes(r.from), r.algorithm);
    else if (r.to / 2 <= r.from)
      s += fmt::format("{} {}", tools_api::format_bytes(r.from), r.algorithm);
    else
      s += fmt::format("{}-{} {}", tools_api::format_bytes(r.from),
                       tools_api::format_bytes(r.to / 2), r.algorithm);
  }
  return s;
}

void print_table(const Result& res, const tools_api::TuningContext& ctx, const PerfOptions& o) {
  std::printf(
      "#\n# %s on %s, %s, %s, in us: median of %d rounds, each the median "
      "over %d iterations of the slowest rank\n",
      std::string(to_string(res.bench)).c_str(), tools_api::to_string(ctx).c_str(),
      std::string(to_string(o.dtypes.front())).c_str(),
      tuned_in_place(res.bench) ? "in place" : "out-of-place", kRounds, o.iters);
  std::string head = fmt::format("# {:>10}", "size");
  for (const std::string& a : res.algorithms) head += fmt::format(" {:>18}", a);
  head += fmt::format("  {:<18} {}", "built-in", "chosen");
  std::printf("%s\n", head.c_str());
  for (const Point& p : res.points) {
    std::string line = fmt::format("  {:>10}", p.bytes);
    for (double t : p.p50_us)
      line += std::isnan(t) ? fmt::format(" {:>18}", "-") : fmt::format(" {:>18.2f}", t);
    line += fmt::format("  {:<18} {}", res.algorithms[p.fallback], res.algorithms[p.chosen]);
    std::printf("%s\n", line.c_str());
  }
  std::printf("# %s: %s\n", std::string(to_string(res.bench)).c_str(),
              describe(ranges_of(res)).c_str());
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Json entry_json(const std::vector<Result>& results, const tools_api::TuningContext& ctx,
                const PerfOptions& o, Communicator& comm) {
  Json context = {
      {"world_size", ctx.world_size},
      {"hosts", ctx.hosts},
      {"transport", ctx.transport},
      {"local_size", comm.local_size()},
      {"host", tools_api::local_host_name()},
      {"dtype", std::string(to_string(o.dtypes.front()))},
      {"date", utc_now()},
      {"tandem_version", TANDEM_PERF_VERSION},
      {"iterations", o.iters},
      {"warmup", o.warmup},
      {"margin_percent", o.tune_margin * 100},
      {"rounds", kRounds},
      {"statistic",
       "per round the median over iterations of the slowest rank's time (out-of-place; "
       "broadcast in place), then the median over rounds"},
  };
  Json collectives = Json::object();
  Json measurements = Json::object();
  for (const Result& res : results) {
    const std::string name(to_string(res.bench));
    Json list = Json::array();
    for (const Range& r : ranges_of(res)) {
      list.push_back({{"from", r.from},
                      {"to", r.to == 0 ? Json(nullptr) : Json(r.to)},
                      {"algorithm", std::string(r.algorithm)}});
    }
    collectives[name] = std::move(list);
    Json points = Json::array();
    for (const Point& p : res.points) {
      Json times = Json::object();
      for (std::size_t i = 0; i < p.p50_us.size(); ++i)
        if (!std::isnan(p.p50_us[i]))
          times[res.algorithms[i]] = std::round(p.p50_us[i] * 100) / 100;
      points.push_back({{"bytes", p.bytes},
                        {"built_in", res.algorithms[p.fallback]},
                        {"chosen", res.algorithms[p.chosen]},
                        {"p50_us", std::move(times)}});
    }
    measurements[name] = std::move(points);
  }
  return {{"context", std::move(context)},
          {"collectives", std::move(collectives)},
          {"measurements", std::move(measurements)}};
}

/// JSON text where what fits on a line stays on one line (a range, a measured size).
void pretty(const Json& v, std::size_t indent, std::string& out) {
  const std::string flat = v.dump();
  if (!v.is_structured() || v.empty() || indent + flat.size() <= 96) {
    out += flat;
    return;
  }
  out += v.is_object() ? "{\n" : "[\n";
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it != v.begin()) out += ",\n";
    out.append(indent + 2, ' ');
    if (v.is_object()) out += Json(it.key()).dump() + ": ";
    pretty(*it, indent + 2, out);
  }
  out += "\n";
  out.append(indent, ' ');
  out += v.is_object() ? "}" : "]";
}

/// Writes `entry` into the file, keeping the entries of other contexts already there.
void write_file(const std::string& path, Json entry) {
  Json doc = {{"tandem_tuning", 1}, {"entries", Json::array()}};
  std::ifstream in(path);
  if (in) {
    std::ostringstream text;
    text << in.rdbuf();
    try {
      const Json old = Json::parse(text.str());
      const auto same = [&](const Json& e) {
        const Json& a = e.at("context");
        const Json& b = entry.at("context");
        return a.value("world_size", 0) == b["world_size"] && a.value("hosts", 0) == b["hosts"] &&
               a.value("transport", "") == b["transport"];
      };
      for (const Json& e : old.at("entries"))
        if (!same(e)) doc["entries"].push_back(e);
    } catch (const Json::exception& e) {
      std::fprintf(stderr,
                   "tandem-perf: %s is not a tuning file (%s); it is replaced by a new one\n",
                   path.c_str(), e.what());
    }
  }
  doc["entries"].push_back(std::move(entry));
  std::string text;
  pretty(doc, 0, text);
  text += "\n";
  // What the runtime will read must pass its own checks.
  tools_api::check_tuning_file(text, path);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.close();
    if (!out)
      TANDEM_THROW(ErrorCode::Io, "--tune-out {}: cannot write {} (check the directory)", path,
                   tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    TANDEM_THROW(ErrorCode::Io, "--tune-out {}: cannot rename {} to it", path, tmp);
}

}  // namespace

int tune(Communicator& comm, const PerfOptions& options) {
  const bool print = comm.rank() == 0;
  const tools_api::TuningContext ctx = tools_api::tuning_context(comm);
  std::vector<Result> results;
  std::size_t wrong = 0;
  for (Bench b : kTunable) {
    if (options.collective_given ? b != options.bench
                                 : tools_api::algorithm_names(kind_of(b)).size() < 2)
      continue;
    results.push_back(measure(comm, options, b));
    choose(results.back(), options.tune_margin);
    wrong += results.back().wrong;
    if (print) {
      print_table(results.back(), ctx, options);
      std::fflush(stdout);
    }
  }
  if (options.collective_given && results.empty()) {
    if (print)
      std::fprintf(stderr,
                   "tandem-perf: --tune: -c %s has nothing to choose; tune allreduce, "
                   "broadcast, reduce, allgather or reduce_scatter\n",
                   std::string(to_string(options.bench)).c_str());
    return 2;
  }
  if (wrong > 0) {
    if (print)
      std::fprintf(stderr, "tandem-perf: --tune: %zu wrong elements; no tuning file written\n",
                   wrong);
    return 1;
  }
  if (print) {
    write_file(options.tune_out, entry_json(results, ctx, options, comm));
    std::printf(
        "#\n# A choice leaves the built-in one only when it is more than %g %% faster, at two "
        "neighbouring sizes at least.\n"
        "# Tuning for %s written to %s; use it with TANDEM_TUNING_FILE=%s\n",
        options.tune_margin * 100, tools_api::to_string(ctx).c_str(), options.tune_out.c_str(),
        options.tune_out.c_str());
  }
  comm.barrier();
  return 0;
}

}  // namespace tandem::tools::perf
