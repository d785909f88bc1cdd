#include "report.hpp"

#include "tools_api/net.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <span>
#include <unistd.h>

namespace tandem::tools::perf {
namespace {

// What each rank tells rank 0 about itself, fixed size so one allgather carries it.
struct RankInfo {
  std::int64_t pid = 0;
  std::int32_t local_rank = 0;
  std::array<char, 116> host{};
};
static_assert(sizeof(RankInfo) == 128);

// Writes `s` with the trailing blanks of each line removed.
void out(const std::string& s) {
  std::string trimmed;
  trimmed.reserve(s.size());
  for (char c : s) {
    if (c == '\n') {
      while (!trimmed.empty() && trimmed.back() == ' ') trimmed.pop_back();
    }
    trimmed.push_back(c);
  }
  std::fputs(trimmed.c_str(), stdout);
  std::fflush(stdout);
}

std::string size_text(std::size_t bytes) {
  if (bytes >= (1u << 30) && bytes % (1u << 30) == 0) return fmt::format("{} GiB", bytes >> 30);
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= (1u << 10) && bytes % (1u << 10) == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

std::string columns(const Measurement& m) {
  if (!m.valid)
    return fmt::format("  {:>9} {:>9} {:>7} {:>7} {:>6}", "N/A", "N/A", "N/A", "N/A", "N/A");
  return fmt::format("  {:>9.2f} {:>9.2f} {:>7.2f} {:>7.2f} {:>6}", m.mean_us, m.p50_us, m.algbw,
                     m.busbw, m.checked ? std::to_string(m.wrong) : "N/A");
}

nlohmann::json to_json(const Measurement& m) {
  if (!m.valid) return nullptr;
  return {{"time_us_mean", m.mean_us},
          {"time_us_p50", m.p50_us},
          {"time_us_p99", m.p99_us},
          {"time_us_max", m.max_us},
          {"time_us_loop", m.loop_us},
          {"time_us_calls", m.calls_us},
          {"algbw_gbps", m.algbw},
          {"busbw_gbps", m.busbw},
          {"wrong", m.checked ? nlohmann::json(m.wrong) : nlohmann::json(nullptr)}};
}

}  // namespace

Report::Report(Communicator& comm, const PerfOptions& options)
    : comm_(comm), options_(options), print_(comm.rank() == 0) {
  RankInfo me;
  me.pid = ::getpid();
  me.local_rank = comm.local_rank();
  const std::string host = tools_api::local_host_name();
  std::memcpy(me.host.data(), host.data(), std::min(host.size(), me.host.size() - 1));
  std::vector<RankInfo> all(static_cast<std::size_t>(comm.size()));
  comm.allgather(BufferView::raw(&me, sizeof me, DataType::u8),
                 BufferView::raw(all.data(), all.size() * sizeof(RankInfo), DataType::u8));
  for (std::size_t r = 0; r < all.size(); ++r) {
    ranks_.push_back(fmt::format("#  Rank {:>3} Pid {:>7} on {} (local rank {})", r, all[r].pid,
                                 all[r].host.data(), all[r].local_rank));
  }
}

void Report::header() const {
  if (!print_) return;
  const int n = comm_.size();
  std::string s = fmt::format("# tandem-perf: {}\n", to_string(options_.bench));
  std::string types, ops;
  for (DataType t : options_.dtypes)
    types += fmt::format("{}{}", types.empty() ? "" : ",", to_string(t));
  for (ReduceOp o : options_.ops) ops += fmt::format("{}{}", ops.empty() ? "" : ",", to_string(o));
  s += fmt::format("#  ranks: {}  dtype: {}  op: {}  root: {}\n", n, types,
                   has_op(options_.bench) ? ops : "none",
                   has_root(options_.bench) ? std::to_string(options_.root) : "-");
  s += fmt::format("#  sizes: {} .. {} x{:g}  iters: {}  warmup: {}  check: {}\n",
                   size_text(options_.min_bytes), size_text(options_.max_bytes), options_.factor,
                   options_.iters, options_.warmup, options_.check ? "on" : "off");
  for (const auto& line : ranks_) s += line + "\n";
  // Rank 0's view of the transports, grouped: "shm: 1-3" style lists stay short.
  std::map<std::string, std::vector<int>> by_transport;
  for (int p = 1; p < n; ++p) by_transport[std::string(comm_.transport_to(p))].push_back(p);
  std::string tr;
  for (const auto& [name, peers] : by_transport) {
    tr += fmt::format("{}{} to {} peer(s) (", tr.empty() ? "" : "; ", name, peers.size());
    for (std::size_t i = 0; i < peers.size() && i < 16; ++i)
      tr += fmt::format("{}{}", i ? "," : "", peers[i]);
    tr += peers.size() > 16 ? ",...)" : ")";
  }
  s += fmt::format("#  Transports from rank 0: {}\n", tr.empty() ? "none (one rank)" : tr);
  s += fmt::format("#  Algorithm: {}\n",
                   options_.algorithm.empty()
                       ? "chosen per size by the selector; the last column names the one "
                         "that ran (out-of-place|in-place where they differ)"
                       : fmt::format("{} (forced with -a)", options_.algorithm));
  if (options_.registered) s += "#  Buffers: registered (Communicator::allocate)\n";
  if (options_.device != "cpu")
    s += fmt::format(
        "#  Buffers: on {} (rank 0's; the last column names the device backend, nccl)\n",
        options_.device == "cuda" ? "cuda:<local rank>" : options_.device);
  s += "#\n";
  s += fmt::format("# {:>10}  {:>12}  {:>6}  {:>6}  {:>4}  {:^43}  {:^43}\n", "", "", "", "", "",
                   "out-of-place", "in-place");
  s += fmt::format(
      "# {:>10}  {:>12}  {:>6}  {:>6}  {:>4}  {:>9} {:>9} {:>7} {:>7} {:>6}  {:>9} "
      "{:>9} {:>7} {:>7} {:>6}  {}\n",
      "size", "count", "type", "redop", "root", "time", "p50", "algbw", "busbw", "#wrong", "time",
      "p50", "algbw", "busbw", "#wrong", "algorithm");
  s += fmt::format(
      "# {:>10}  {:>12}  {:>6}  {:>6}  {:>4}  {:>9} {:>9} {:>7} {:>7} {:>6}  {:>9} "
      "{:>9} {:>7} {:>7} {:>6}\n",
      "(B)", "(elements)", "", "", "", "(us)", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)",
      "(GB/s)", "(GB/s)", "");
  out(s);
}

void Report::row(const Row& r) {
  rows_.push_back(r);
  if (!print_) return;
  out(fmt::format("  {:>10}  {:>12}  {:>6}  {:>6}  {:>4}{}{}  {}\n", r.bytes, r.count,
                  to_string(r.dtype), has_op(options_.bench) ? to_string(r.op) : "none", r.root,
                  columns(r.out_of_place), columns(r.in_place), r.algorithm));
}

std::size_t Report::footer() const {
  std::size_t wrong = 0;
  double bw = 0;
  int measured = 0;
  for (const Row& r : rows_) {
    for (const Measurement* m : {&r.out_of_place, &r.in_place}) {
      if (!m->valid) continue;
      wrong += m->wrong;
      bw += m->busbw;
      ++measured;
    }
  }
  if (print_) {
    std::string s;
    if (rows_.empty()) s += "# no size from -b to -e holds a whole element per rank\n";
    s += fmt::format("# Out of bounds values : {} {}\n", wrong, wrong == 0 ? "OK" : "FAILED");
    s += fmt::format("# Avg bus bandwidth : {:.4f}\n", measured ? bw / measured : 0.0);
    if (copy_gbps_ > 0)
      s += fmt::format(
          "# Device-to-device copy of {} on rank 0's device, this run : {:.2f} GB/s (compare "
          "busbw)\n",
          size_text(copy_bytes_), copy_gbps_);
    s += "#\n";
    out(s);
  }
  return wrong;
}

void Report::write_json(const std::string& path) const {
  if (!print_) return;
  nlohmann::json rows = nlohmann::json::array();
  for (const Row& r : rows_) {
    rows.push_back({{"size_bytes", r.bytes},
                    {"count", r.count},
                    {"type", to_string(r.dtype)},
                    {"redop", has_op(options_.bench) ? to_string(r.op) : "none"},
                    {"root", r.root},
                    {"algorithm", r.algorithm},
                    {"out_of_place", to_json(r.out_of_place)},
                    {"in_place", to_json(r.in_place)}});
  }
  std::vector<std::string> transports;
  transports.reserve(static_cast<std::size_t>(comm_.size()));
  for (int p = 0; p < comm_.size(); ++p) transports.emplace_back(comm_.transport_to(p));
  const nlohmann::json doc = {{"collective", to_string(options_.bench)},
                              {"world_size", comm_.size()},
                              {"iters", options_.iters},
                              {"warmup", options_.warmup},
                              {"check", options_.check},
                              {"bus_factor", bus_factor(options_.bench, comm_.size())},
                              {"transports_from_rank0", transports},
                              {"rows", rows}};
  std::ofstream f(path);
  f << doc.dump(2) << "\n";
  f.close();
  if (!f) TANDEM_THROW(ErrorCode::Io, "tandem-perf: cannot write --json {}", path);
}

}  // namespace tandem::tools::perf
