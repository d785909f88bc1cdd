// Gloo reference for tandem-perf: allreduce, broadcast and allgather of f32 over Gloo's TCP
// transport, timed the same way and printed in the same columns (nccl-tests' layout).
//
//   RANK=r WORLD_SIZE=n gloo_bench --store DIR -c allreduce -b 8 -e 128M -f 4 -n 20 -w 5
//
// Every rank of one run points --store at the same empty directory (gloo's FileStore); the
// ranks connect a full mesh of TCP pairs on --host (127.0.0.1). bench/gloo/run.sh starts them.
//
// Gloo offers several algorithms per collective (the AllreduceOptions API and the older
// Algorithm classes). For each size and each column (out-of-place, in-place) every candidate
// runs a short probe (warmup, then max(5, iters/4) timed iterations); the one with the lowest
// median of the slowest rank's times wins (a median, so that one descheduled iteration does
// not decide), and only the winner is then measured: WARMUP untimed
// iterations, a barrier, ITERS timed iterations, the per-iteration times gathered once at the
// end. A row reports the mean and median over iterations of the slowest rank's time,
// algbw = size / mean, busbw = algbw x 2(n-1)/n (allreduce), x (n-1)/n (allgather), x 1
// (broadcast), then #wrong from one checked iteration with exact small-integer inputs.
// Allgather sizes are the whole output buffer (count per rank = size / ranks / 4).
// The winner is named in the last column ("A" or "A|B": out-of-place|in-place); -v prints
// every candidate's probe median; -a NAME forces one candidate (list: gloo_candidates.hpp).
#include "gloo_candidates.hpp"

#include <climits>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <gloo/allgather.h>
#include <gloo/barrier.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <memory>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

namespace gloo_bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  Coll coll = Coll::allreduce;
  std::string coll_name = "allreduce";
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{128} << 20;
  double factor = 4;
  int iters = 20;
  int warmup = 5;
  int root = 0;
  std::string algo;  // empty: fastest candidate per size
  std::string store;
  std::string host = "127.0.0.1";
  int timeout_s = 60;
  bool verbose = false;
  std::string json_path;
};

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "gloo_bench: %s\n(run with --help for the flags)\n", msg.c_str());
  std::exit(2);
}

std::size_t parse_size(const std::string& s, const char* flag) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  double mult = 1;
  if (end != nullptr && *end != '\0') {
    switch (*end) {
      case 'k':
      case 'K':
        mult = 1024.0;
        break;
      case 'm':
      case 'M':
        mult = 1024.0 * 1024.0;
        break;
      case 'g':
      case 'G':
        mult = 1024.0 * 1024.0 * 1024.0;
        break;
      default:
        usage_error(std::string(flag) + " '" + s + "' is not a size (8, 64K, 128M, 1G)");
    }
    if (end[1] != '\0' && !((end[1] == 'B' || end[1] == 'b') && end[2] == '\0'))
      usage_error(std::string(flag) + " '" + s + "' is not a size (8, 64K, 128M, 1G)");
  }
  if (end == s.c_str() || !(v >= 0) || v * mult > 1.8e19)
    usage_error(std::string(flag) + " '" + s + "' is not a size (8, 64K, 128M, 1G)");
  return static_cast<std::size_t>(v * mult);
}

int parse_int(const std::string& s, const char* flag, int lo, int hi) {
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (end == s.c_str() || *end != '\0' || v < lo || v > hi)
    usage_error(std::string(flag) + " '" + s + "': use " + std::to_string(lo) + " to " +
                std::to_string(hi));
  return static_cast<int>(v);
}

const char* kHelp =
    "usage: RANK=r WORLD_SIZE=n gloo_bench --store DIR [flags]\n"
    "  -c, --collective  allreduce | broadcast | allgather   (allreduce)\n"
    "  -b, --minbytes    smallest size, K/M/G suffixes        (8)\n"
    "  -e, --maxbytes    largest size                         (128M)\n"
    "  -f, --stepfactor  multiply the size by this each step  (4)\n"
    "  -n, --iters       timed iterations per size            (20)\n"
    "  -w, --warmup      untimed iterations before them       (5)\n"
    "  -r, --root        root of broadcast                    (0)\n"
    "  -d, --datatype    f32 only;  -o, --op  sum only\n"
    "  -a, --algo        force one candidate (see -v for the names); default: fastest\n"
    "  -v, --verbose     print every candidate's probe per size\n"
    "      --store DIR   FileStore directory, the same empty one for all ranks\n"
    "                    (default: $GLOO_BENCH_STORE)\n"
    "      --host ADDR   address the TCP pairs bind to        (127.0.0.1)\n"
    "      --timeout S   Gloo's deadline for rendezvous and every operation (60)\n"
    "      --json FILE   also write the rows to FILE (rank 0; tandem-perf's layout)\n";

Options parse(int argc, char** argv) {
  Options o;
  if (const char* s = std::getenv("GLOO_BENCH_STORE")) o.store = s;
  std::string dtype = "f32", op = "sum";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kHelp, stdout);
      std::exit(0);
    }
    if (a == "-v" || a == "--verbose") {
      o.verbose = true;
      continue;
    }
    if (i + 1 >= argc) usage_error("flag " + a + " needs a value");
    const std::string v = argv[++i];
    if (a == "-c" || a == "--collective") {
      o.coll_name = v;
      if (v == "allreduce")
        o.coll = Coll::allreduce;
      else if (v == "broadcast")
        o.coll = Coll::broadcast;
      else if (v == "allgather")
        o.coll = Coll::allgather;
      else
        usage_error("-c '" + v + "': use allreduce, broadcast or allgather");
    } else if (a == "-b" || a == "--minbytes")
      o.min_bytes = parse_size(v, "-b");
    else if (a == "-e" || a == "--maxbytes")
      o.max_bytes = parse_size(v, "-e");
    else if (a == "-f" || a == "--stepfactor")
      o.factor = std::atof(v.c_str());
    else if (a == "-n" || a == "--iters")
      o.iters = parse_int(v, "-n", 1, 1000000);
    else if (a == "-w" || a == "--warmup" || a == "--warmup_iters")
      o.warmup = parse_int(v, "-w", 0, 1000000);
    else if (a == "-r" || a == "--root")
      o.root = parse_int(v, "-r", 0, INT_MAX);
    else if (a == "-d" || a == "--datatype")
      dtype = v;
    else if (a == "-o" || a == "--op")
      op = v;
    else if (a == "-a" || a == "--algo")
      o.algo = v;
    else if (a == "--store")
      o.store = v;
    else if (a == "--host")
      o.host = v;
    else if (a == "--timeout")
      o.timeout_s = parse_int(v, "--timeout", 1, 86400);
    else if (a == "--json")
      o.json_path = v;
    else
      usage_error("unknown flag " + a);
  }
  if (dtype != "f32") usage_error("-d '" + dtype + "': this benchmark measures f32 only");
  if (op != "sum") usage_error("-o '" + op + "': this benchmark measures sum only");
  if (o.max_bytes < o.min_bytes) usage_error("-e is smaller than -b");
  if (!(o.factor > 1) && o.max_bytes != o.min_bytes) usage_error("-f: the step factor must be > 1");
  if (!(o.factor < 1e6)) usage_error("-f: too large");
  if (o.store.empty()) usage_error("no store: pass --store DIR (or set GLOO_BENCH_STORE)");
  return o;
}

int env_int(const char* name) {
  const char* s = std::getenv(name);
  if (s == nullptr || *s == '\0') usage_error(std::string(name) + " is not set");
  return parse_int(s, name, 0, 1 << 20);
}

// ---- buffers and the deterministic pattern (the same values as tandem-perf's) -------------

struct FreeDeleter {
  void operator()(float* p) const noexcept { std::free(p); }
};
using Block = std::unique_ptr<float, FreeDeleter>;

Block allocate(std::size_t bytes) {
  const std::size_t rounded = (std::max<std::size_t>(bytes, 64) + 4095) / 4096 * 4096;
  auto* p = static_cast<float*>(std::aligned_alloc(4096, rounded));
  if (p == nullptr) throw std::runtime_error("cannot allocate " + std::to_string(rounded) + " B");
  std::memset(p, 0, rounded);  // page faults here, not in the timed loop
  return Block(p);
}

float reduce_input(int rank, std::size_t i) {
  return static_cast<float>(static_cast<long>((static_cast<std::size_t>(rank) + i) % 5) - 2);
}
float data_value(std::size_t src, std::size_t i) {
  return static_cast<float>((src * 31 + i * 7 + 1) % 97);
}
constexpr float kSentinel = 123;

// ---- small collectives for the bookkeeping ------------------------------------------------

constexpr std::uint32_t kUtilTag = 7;

void barrier(const Ctx& ctx) {
  gloo::BarrierOptions o(ctx);
  o.setTag(kUtilTag);
  gloo::barrier(o);
}

template <typename T>
std::vector<T> allgather_all(const Ctx& ctx, std::vector<T> mine) {
  std::vector<T> all(mine.size() * static_cast<std::size_t>(ctx->size));
  gloo::AllgatherOptions o(ctx);
  o.setInput(mine.data(), mine.size());
  o.setOutput(all.data(), all.size());
  o.setTag(kUtilTag);
  gloo::allgather(o);
  return all;
}

// ---- measuring ------------------------------------------------------------------------------

struct Stats {
  bool valid = false;
  double mean_us = 0, p50_us = 0, algbw = 0, busbw = 0;
  std::int64_t wrong = 0;
  std::string algorithm;
  std::vector<std::pair<std::string, double>> probes;  // candidate -> probe median (us)
};

// Runs `p` warmup + iters times; returns the per-iteration time of the slowest rank.
std::vector<double> time_slowest(const Ctx& ctx, const Prepared& p, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) p.run();
  barrier(ctx);
  std::vector<double> times(static_cast<std::size_t>(iters));
  for (auto& t : times) {
    const auto t0 = Clock::now();
    p.run();
    t = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }
  // Once per measurement, outside the timed loop: every rank gets every rank's times, so all
  // ranks compute the same slowest times (and pick the same winner).
  const std::vector<double> all = allgather_all(ctx, times);
  std::vector<double> slowest(times.size(), 0.0);
  for (int r = 0; r < ctx->size; ++r)
    for (std::size_t i = 0; i < times.size(); ++i)
      slowest[i] = std::max(slowest[i], all[static_cast<std::size_t>(r) * times.size() + i]);
  return slowest;
}

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

// The lower median, as tandem-perf's p50.
double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

int probe_iters(const Options& o) {
  return std::max(5, o.iters / 4);
}

// One checked iteration; returns the wrong elements summed over ranks. The Algorithm classes
// let a peer write straight into this rank's registered buffer as soon as it runs, so every
// rank fills its buffers before any rank starts the checked run (the barrier in `go`).
std::int64_t check(const Ctx& ctx, const Options& o, const Prepared& p, const Views& v) {
  const int rank = ctx->rank;
  const std::size_t per = v.per;
  std::int64_t wrong = 0;
  const auto go = [&] {
    barrier(ctx);
    p.run();
  };
  switch (o.coll) {
    case Coll::allreduce:
      if (!v.in_place) std::fill(v.out, v.out + per, kSentinel);
      for (std::size_t i = 0; i < per; ++i) v.in[i] = reduce_input(rank, i);
      go();
      for (std::size_t i = 0; i < per; ++i) {
        float want = 0;
        for (int r = 0; r < ctx->size; ++r) want += reduce_input(r, i);
        if (v.out[i] != want) ++wrong;
      }
      break;
    case Coll::broadcast: {
      const auto root = static_cast<std::size_t>(o.root);
      std::fill(v.out, v.out + per, kSentinel);
      if (rank == o.root)
        for (std::size_t i = 0; i < per; ++i) v.in[i] = data_value(root, i);
      go();
      for (std::size_t i = 0; i < per; ++i)
        if (v.out[i] != data_value(root, i)) ++wrong;
      break;
    }
    case Coll::allgather:
      std::fill(v.out, v.out + v.out_count, kSentinel);
      for (std::size_t i = 0; i < per; ++i) v.in[i] = data_value(static_cast<std::size_t>(rank), i);
      go();
      for (std::size_t g = 0; g < v.out_count; ++g)
        if (v.out[g] != data_value(g / per, g % per)) ++wrong;
      break;
  }
  std::int64_t total = 0;
  for (std::int64_t w : allgather_all(ctx, std::vector<std::int64_t>{wrong})) total += w;
  return total;
}

// The candidates -a leaves; exits with a usage error (before any rendezvous) when none.
std::vector<Candidate> selected(const Options& o, int world) {
  std::vector<Candidate> all = candidates(o.coll, o.max_bytes / sizeof(float), world);
  std::vector<Candidate> list;
  std::string names;
  for (Candidate& c : all) {
    names += " " + c.name;
    if (o.algo.empty() || o.algo == c.name) list.push_back(std::move(c));
  }
  if (list.empty())
    usage_error("-a '" + o.algo + "' is not a candidate for " + o.coll_name + " on " +
                std::to_string(world) + " ranks; use one of:" + names);
  return list;
}

double bus_factor(Coll c, int world) {
  const double n = world;
  if (c == Coll::allreduce) return 2 * (n - 1) / n;
  if (c == Coll::allgather) return (n - 1) / n;
  return 1;
}

class Bench {
 public:
  Bench(Ctx ctx, const Options& o)
      : ctx_(std::move(ctx)),
        o_(o),
        list_(selected(o, ctx_->size)),
        a_(allocate(o.max_bytes)),
        b_(allocate(o.max_bytes)) {}

  const std::vector<Candidate>& list() const { return list_; }

  Stats measure(std::size_t per, std::size_t row_bytes, bool in_place) {
    const auto rank = static_cast<std::size_t>(ctx_->rank);
    const auto world = static_cast<std::size_t>(ctx_->size);
    Views v;
    v.per = per;
    v.out_count = o_.coll == Coll::allgather ? per * world : per;
    v.in_place = in_place;
    v.in = a_.get();
    v.out = b_.get();
    if (in_place) v.in = o_.coll == Coll::allgather ? b_.get() + rank * per : b_.get();
    std::memset(a_.get(), 0, per * sizeof(float));
    std::memset(b_.get(), 0, v.out_count * sizeof(float));

    Stats s;
    std::size_t best = 0;
    if (list_.size() > 1) {
      double best_p50 = 0;
      for (std::size_t c = 0; c < list_.size(); ++c) {
        const double m = median_of(run_prepared(c, v, o_.warmup, probe_iters(o_), nullptr));
        s.probes.emplace_back(list_[c].name, m);
        if (c == 0 || m < best_p50) {
          best_p50 = m;
          best = c;
        }
      }
    }
    s.algorithm = list_[best].name;
    std::int64_t wrong = 0;
    std::vector<double> slowest = run_prepared(best, v, o_.warmup, o_.iters, &wrong);
    s.mean_us = mean_of(slowest);
    s.p50_us = median_of(slowest);
    s.algbw = s.mean_us > 0 ? static_cast<double>(row_bytes) / (s.mean_us * 1e3) : 0;
    s.busbw = s.algbw * bus_factor(o_.coll, ctx_->size);
    s.wrong = wrong;
    s.valid = true;
    return s;
  }

 private:
  // Prepares candidate `c` on `v`, times it and, when `wrong` is given, checks it; the Gloo
  // state is released after a barrier, so no message for it can still be in flight.
  std::vector<double> run_prepared(std::size_t c, const Views& v, int warmup, int iters,
                                   std::int64_t* wrong) {
    Prepared p = list_[c].prepare(ctx_, v, o_.root);
    std::vector<double> slowest = time_slowest(ctx_, p, warmup, iters);
    if (wrong != nullptr) *wrong = check(ctx_, o_, p, v);
    barrier(ctx_);
    return slowest;
  }

  Ctx ctx_;
  const Options& o_;
  std::vector<Candidate> list_;
  Block a_, b_;
};

// ---- printing -------------------------------------------------------------------------------

std::string size_text(std::size_t bytes) {
  if (bytes >= (1u << 30) && bytes % (1u << 30) == 0) return std::to_string(bytes >> 30) + " GiB";
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (1u << 10) && bytes % (1u << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

struct Row {
  std::size_t bytes = 0, count = 0;
  int root = -1;
  Stats oop, ip;
};

void print_header(const Ctx& ctx, const Options& o, const std::vector<Candidate>& list) {
  const std::vector<std::int64_t> pids =
      allgather_all(ctx, std::vector<std::int64_t>{static_cast<std::int64_t>(::getpid())});
  if (ctx->rank != 0) return;
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  std::string names;
  for (const Candidate& c : list) names += (names.empty() ? "" : ", ") + c.name;
  std::printf("# gloo_bench: %s\n", o.coll_name.c_str());
  std::printf("#  ranks: %d  dtype: f32  op: %s  root: %s\n", ctx->size,
              o.coll == Coll::allreduce ? "sum" : "none",
              o.coll == Coll::broadcast ? std::to_string(o.root).c_str() : "-");
  std::printf("#  sizes: %s .. %s x%g  iters: %d  warmup: %d  check: on\n",
              size_text(o.min_bytes).c_str(), size_text(o.max_bytes).c_str(), o.factor, o.iters,
              o.warmup);
  for (std::size_t r = 0; r < pids.size(); ++r)
    std::printf("#  Rank %3zu Pid %7lld on %s\n", r, static_cast<long long>(pids[r]), host);
  std::printf("#  Transports from rank 0: gloo tcp (%s) to %d peer(s); rendezvous: FileStore\n",
              o.host.c_str(), ctx->size - 1);
  if (list.size() > 1)
    std::printf(
        "#  Algorithm: fastest per size and column of {%s} by the median of a "
        "%d-iteration probe (last column: out-of-place|in-place when they differ)\n",
        names.c_str(), probe_iters(o));
  else
    std::printf("#  Algorithm: %s (forced with -a)\n", names.c_str());
  std::printf("#\n# %10s  %12s  %6s  %6s  %4s  %-43s  %-43s\n", "", "", "", "", "",
              "               out-of-place", "                 in-place");
  std::printf("# %10s  %12s  %6s  %6s  %4s  %9s %9s %7s %7s %6s  %9s %9s %7s %7s %6s  %s\n", "size",
              "count", "type", "redop", "root", "time", "p50", "algbw", "busbw", "#wrong", "time",
              "p50", "algbw", "busbw", "#wrong", "algorithm");
  std::printf("# %10s  %12s  %6s  %6s  %4s  %9s %9s %7s %7s %6s  %9s %9s %7s %7s %6s\n", "(B)",
              "(elements)", "", "", "", "(us)", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)",
              "(GB/s)", "(GB/s)", "");
  std::fflush(stdout);
}

void print_row(const Options& o, const Row& r) {
  const std::string algo =
      r.oop.algorithm == r.ip.algorithm ? r.oop.algorithm : r.oop.algorithm + "|" + r.ip.algorithm;
  std::printf("  %10zu  %12zu  %6s  %6s  %4d", r.bytes, r.count, "f32",
              o.coll == Coll::allreduce ? "sum" : "none", r.root);
  for (const Stats* s : {&r.oop, &r.ip})
    std::printf("  %9.2f %9.2f %7.2f %7.2f %6lld", s->mean_us, s->p50_us, s->algbw, s->busbw,
                static_cast<long long>(s->wrong));
  std::printf("  %s\n", algo.c_str());
  if (o.verbose) {
    for (const char* col : {"out-of-place", "in-place"}) {
      const Stats& s = col[0] == 'o' ? r.oop : r.ip;
      std::printf("#   probe %-12s", col);
      for (const auto& [name, p50] : s.probes) std::printf("  %s %.2f", name.c_str(), p50);
      std::printf("\n");
    }
  }
  std::fflush(stdout);
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::string json_stats(const Stats& s) {
  if (!s.valid) return "null";
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"time_us_mean\": %.4f, \"time_us_p50\": %.4f, \"algbw_gbps\": %.6f, "
                "\"busbw_gbps\": %.6f, \"wrong\": %lld, \"algorithm\": \"%s\"",
                s.mean_us, s.p50_us, s.algbw, s.busbw, static_cast<long long>(s.wrong),
                json_escape(s.algorithm).c_str());
  std::string out = buf;
  out += ", \"probe_us_p50\": {";
  for (std::size_t i = 0; i < s.probes.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s\"%s\": %.4f", i ? ", " : "",
                  json_escape(s.probes[i].first).c_str(), s.probes[i].second);
    out += buf;
  }
  return out + "}}";
}

// Same document as tandem-perf --json (plus "library" and, per measurement, the algorithm and
// the candidates' probe medians).
void write_json(const Options& o, int world, const std::vector<Row>& rows) {
  std::ofstream f(o.json_path);
  f << "{\n  \"library\": \"gloo\",\n  \"collective\": \"" << o.coll_name << "\",\n"
    << "  \"world_size\": " << world << ",\n  \"iters\": " << o.iters
    << ",\n  \"warmup\": " << o.warmup << ",\n  \"check\": true,\n"
    << "  \"bus_factor\": " << bus_factor(o.coll, world) << ",\n"
    << "  \"transports_from_rank0\": [";
  for (int p = 0; p < world; ++p) f << (p ? ", " : "") << (p == 0 ? "\"self\"" : "\"gloo-tcp\"");
  f << "],\n  \"rows\": [";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const std::string algo = r.oop.algorithm == r.ip.algorithm
                                 ? r.oop.algorithm
                                 : r.oop.algorithm + "|" + r.ip.algorithm;
    f << (i ? "," : "") << "\n    {\"size_bytes\": " << r.bytes << ", \"count\": " << r.count
      << ", \"type\": \"f32\", \"redop\": \"" << (o.coll == Coll::allreduce ? "sum" : "none")
      << "\", \"root\": " << r.root << ", \"algorithm\": \"" << json_escape(algo)
      << "\",\n     \"out_of_place\": " << json_stats(r.oop)
      << ",\n     \"in_place\": " << json_stats(r.ip) << "}";
  }
  f << "\n  ]\n}\n";
  f.close();
  if (!f) throw std::runtime_error("cannot write --json " + o.json_path);
}

std::size_t next_size(std::size_t size, double factor) {
  const double next = static_cast<double>(size) * factor;
  return next >= 1.8e19 ? SIZE_MAX : std::max(size + 1, static_cast<std::size_t>(next));
}

int run(const Options& o, int rank, int world) {
  if (o.coll == Coll::broadcast && o.root >= world)
    usage_error("-r " + std::to_string(o.root) + ": the root must be a rank below " +
                std::to_string(world));
  selected(o, world);  // a bad -a fails here, not after the rendezvous
  gloo::transport::tcp::attr attr;
  attr.hostname = o.host;
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(o.store);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, world);
  context->setTimeout(std::chrono::seconds(o.timeout_s));
  context->connectFullMesh(store, device);
  const Ctx ctx = context;

  Bench bench(ctx, o);
  print_header(ctx, o, bench.list());
  std::vector<Row> rows;
  std::int64_t wrong = 0;
  double bw_sum = 0;
  int bw_n = 0;
  const auto w = static_cast<std::size_t>(world);
  for (std::size_t size = o.min_bytes; size <= o.max_bytes; size = next_size(size, o.factor)) {
    Row r;
    r.count = o.coll == Coll::allgather ? size / (w * sizeof(float)) : size / sizeof(float);
    r.bytes = (o.coll == Coll::allgather ? r.count * w : r.count) * sizeof(float);
    r.root = o.coll == Coll::broadcast ? o.root : -1;
    if (r.count > 0) {
      r.oop = bench.measure(r.count, r.bytes, false);
      r.ip = bench.measure(r.count, r.bytes, true);
      wrong += r.oop.wrong + r.ip.wrong;
      bw_sum += r.oop.busbw + r.ip.busbw;
      bw_n += 2;
      if (rank == 0) print_row(o, r);
      rows.push_back(std::move(r));
    }
    if (size == SIZE_MAX) break;
  }
  if (rank == 0) {
    if (rows.empty()) std::printf("# no size from -b to -e holds a whole element per rank\n");
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(wrong),
                wrong == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth : %.4f\n#\n", bw_n ? bw_sum / bw_n : 0.0);
    std::fflush(stdout);
    if (!o.json_path.empty()) write_json(o, world, rows);
  }
  barrier(ctx);
  return wrong == 0 ? 0 : 1;
}

int bench_main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const int rank = env_int("RANK");
  const int world = env_int("WORLD_SIZE");
  if (world < 1 || rank >= world)
    usage_error("RANK " + std::to_string(rank) + " is not below WORLD_SIZE " +
                std::to_string(world));
  try {
    const int rc = run(o, rank, world);
    std::fflush(nullptr);
    // Skip Gloo's teardown: a peer that already left must not make this rank wait.
    std::_Exit(rc);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_bench: rank %d of %d: %s\n", rank, world, e.what());
    std::fflush(nullptr);
    std::_Exit(1);
  }
}

}  // namespace
}  // namespace gloo_bench

int main(int argc, char** argv) {
  return gloo_bench::bench_main(argc, argv);
}
