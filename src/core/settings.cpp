#include <tandem/error.hpp>
#include <tandem/settings.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace tandem::settings {
namespace {

using enum Type;

// The one table of TANDEM_* variables, sorted by name. README.md documents exactly these
// (tests/unit/core/settings_test.cpp checks both directions).
constexpr std::array kSettings{
    Setting{"TANDEM_ALGO", string, "",
            "Forces an algorithm (e.g. ring, recursive_doubling, tree), optionally per "
            "collective: allreduce=ring,broadcast=tree."},
    Setting{"TANDEM_BUFFSIZE", string, "auto",
            "Shared-memory buffer per channel (per peer, per direction), in bytes (4M, 512K); "
            "auto: 4M with up to 8 ranks on the host, then 28M shared among a rank's host "
            "peers (a power of two, at least 256K), so that a host's segments grow with its "
            "ranks, not their square."},
    Setting{"TANDEM_CHUNK_SIZE", bytes, "1M", "Pipelining chunk of the large-message algorithms."},
    Setting{"TANDEM_CMA", boolean, "1",
            "0: ranks of one host never read or write each other's buffers with "
            "process_vm_readv/writev (cross-memory attach); broadcast and allgather then copy "
            "through shared memory."},
    Setting{"TANDEM_CUDA_LIBRARY", string, "",
            "The CUDA backend library loaded at the first CUDA buffer; empty: "
            "libtandem_cuda.so next to libtandem."},
    Setting{"TANDEM_DEBUG", choice, "WARN", "Log level: WARN, INFO or DETAIL."},
    Setting{"TANDEM_DEBUG_SUBSYS", string, "ALL",
            "Subsystems to log: a comma list of INIT, STORE, SHM, TCP, COLL, ALGO, RUN, PERF, "
            "DDP, DATA, or ALL; a leading ^ excludes the listed ones (^SHM,TCP)."},
    Setting{"TANDEM_GPU_TRANSPORT", choice, "auto",
            "CUDA collectives: auto (NCCL with one rank per GPU; CUDA IPC where ranks share a "
            "GPU or the build has no NCCL), nccl or cuda_ipc."},
    Setting{"TANDEM_JOIN", boolean, "0",
            "Set by tandemrun for a replacement worker: Communicator::from_env() joins the "
            "running group (Communicator::join) instead of starting one; RANK and WORLD_SIZE "
            "are then ignored, the group gives the rank."},
    Setting{"TANDEM_PYTHON", string, "",
            "tandemrun: the interpreter of a .py PROGRAM or -m MODULE (empty: python3 from "
            "PATH)."},
    Setting{"TANDEM_RESTART_COUNT", integer, "0",
            "Set by tandemrun: how many times the workers were restarted."},
    Setting{"TANDEM_RUN_ID", string, "", "Set by tandemrun: names this run (shm segments, logs)."},
    Setting{"TANDEM_SHM_DISABLE", boolean, "0",
            "1: ranks on one host use TCP instead of shared memory."},
    Setting{"TANDEM_SOCKETS_PER_PEER", integer, "1",
            "TCP data streams per peer (large messages are striped over them)."},
    Setting{"TANDEM_SOCKET_IFNAME", string, "",
            "Network interfaces for TCP in NCCL's syntax (eth0; prefixes eth,ib; ^docker,lo "
            "excludes; =eth0 exact): the first that matches; unset: NCCL_SOCKET_IFNAME, else "
            "GLOO_SOCKET_IFNAME, else the interface that routes to MASTER_ADDR, loopback on "
            "one host."},
    Setting{"TANDEM_SPIN_US", string, "auto",
            "Microseconds a waiting rank spins before it blocks; auto: 50, or 0 (block at once) "
            "when a host runs more ranks than the CPUs they may use."},
    Setting{"TANDEM_STALL_WARN", seconds, "60",
            "Seconds a collective may run before each rank logs which ranks have not entered "
            "it (0: never)."},
    Setting{"TANDEM_STORE_ADDR", string, "",
            "Set by tandemrun: host:port of its rendezvous store, which every rank joins (rank 0 "
            "then hosts none at MASTER_ADDR:MASTER_PORT)."},
    Setting{"TANDEM_STORE_TOKEN", string, "",
            "Shared secret for the store and peer handshakes (tandemrun generates one)."},
    Setting{"TANDEM_STREAM_BYTES", bytes, "0",
            "Copies and reductions whose destination is at least this large write it with "
            "streaming (non-temporal) stores; 0: the last-level cache size, at most 16 MiB."},
    Setting{"TANDEM_TIMEOUT", seconds, "600",
            "Deadline of every blocking operation, in seconds (fractions allowed)."},
    Setting{"TANDEM_TRACE", string, "",
            "Writes a Chrome-trace timeline of collectives and DDP buckets to this file (one "
            "part per rank, merged by tandemrun); empty: off."},
    Setting{"TANDEM_TRACE_EVENTS", integer, "100000",
            "Timeline: the last events kept per communicator and per Reducer."},
    Setting{"TANDEM_TRANSPORT", string, "auto",
            "Between hosts: ucx (UCX: InfiniBand, RoCE, or its tcp), tcp (tandem's own), auto "
            "(UCX where the host has an RDMA device and the build has UCX)."},
    Setting{"TANDEM_TUNING_FILE", string, "",
            "Tuning file written by tandem-perf --tune: the algorithm per collective and size "
            "measured for this world size, host count and transport."},
};

static_assert(std::ranges::is_sorted(kSettings, {}, &Setting::name),
              "keep the settings table sorted by name");

std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) noexcept {
  return std::ranges::equal(a, b, [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) ==
           std::tolower(static_cast<unsigned char>(y));
  });
}

// The value the user set, or nullopt when unset or empty (the default applies).
std::optional<std::string> from_env(const Setting& s) {
  const char* v = std::getenv(std::string(s.name).c_str());
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::string value_of(const Setting& s) {
  auto v = from_env(s);
  return v ? std::move(*v) : std::string(s.default_value);
}

[[noreturn]] void malformed(const Setting& s, std::string_view value, std::string_view what,
                            std::string_view example) {
  TANDEM_THROW(ErrorCode::InvalidArgument, "{}='{}' is not {} (example: {}={}); fix or unset it",
               s.name, value, what, s.name, example);
}

std::optional<std::int64_t> parse_int(std::string_view t) noexcept {
  t = trim(t);
  if (!t.empty() && t.front() == '+') t.remove_prefix(1);
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || ec != std::errc() || end != t.data() + t.size()) return std::nullopt;
  return v;
}

std::optional<double> parse_seconds(std::string_view t) noexcept {
  t = trim(t);
  if (!t.empty() && (t.back() == 's' || t.back() == 'S')) t = trim(t.substr(0, t.size() - 1));
  if (!t.empty() && t.front() == '+') t.remove_prefix(1);
  double v = 0;
  const auto [end, ec] =
      std::from_chars(t.data(), t.data() + t.size(), v, std::chars_format::general);
  if (t.empty() || ec != std::errc() || end != t.data() + t.size() || !std::isfinite(v) || v < 0)
    return std::nullopt;
  return v;
}

}  // namespace

std::span<const Setting> all() noexcept {
  return kSettings;
}

const Setting& find(std::string_view name) {
  const auto it = std::ranges::lower_bound(kSettings, name, {}, &Setting::name);
  if (it == kSettings.end() || it->name != name)
    TANDEM_THROW(ErrorCode::Internal,
                 "setting {} is not declared: add it to the table in src/core/settings.cpp and to "
                 "the settings table of README.md",
                 name);
  return *it;
}

std::string get_string(std::string_view name) {
  return value_of(find(name));
}

bool get_bool(std::string_view name) {
  const Setting& s = find(name);
  const std::string v = value_of(s);
  const std::string_view t = trim(v);
  for (std::string_view yes : {"1", "true", "yes", "on"})
    if (iequals(t, yes)) return true;
  for (std::string_view no : {"0", "false", "no", "off"})
    if (iequals(t, no)) return false;
  malformed(s, v, "a boolean (1/0, true/false, yes/no, on/off)", "1");
}

std::int64_t get_int(std::string_view name) {
  const Setting& s = find(name);
  const std::string v = value_of(s);
  if (auto i = parse_int(v)) return *i;
  malformed(s, v, "an integer", s.default_value.empty() ? "1" : s.default_value);
}

std::chrono::nanoseconds get_seconds(std::string_view name) {
  const Setting& s = find(name);
  const std::string v = value_of(s);
  const auto secs = parse_seconds(v);
  if (!secs)
    malformed(s, v, "a number of seconds", s.default_value.empty() ? "60" : s.default_value);
  // Saturate: a huge timeout means "practically never", not an overflow.
  const double ns = *secs * 1e9;
  constexpr auto kMax = std::chrono::nanoseconds::max().count();
  if (ns >= static_cast<double>(kMax)) return std::chrono::nanoseconds::max();
  return std::chrono::nanoseconds(static_cast<std::int64_t>(ns));
}

std::uint64_t get_bytes(std::string_view name) {
  const Setting& s = find(name);
  const std::string v = value_of(s);
  if (auto b = parse_bytes(v)) return *b;
  malformed(s, v, "a byte count (a number with an optional K, M, G or T suffix)",
            s.default_value.empty() ? "4M" : s.default_value);
}

std::optional<std::uint64_t> parse_bytes(std::string_view text) noexcept {
  __extension__ using u128 = unsigned __int128;
  std::string_view t = trim(text);
  std::size_t i = 0;
  u128 whole = 0;
  std::size_t whole_digits = 0;
  for (; i < t.size() && std::isdigit(static_cast<unsigned char>(t[i])); ++i, ++whole_digits) {
    whole = whole * 10 + static_cast<unsigned>(t[i] - '0');
    if (whole > std::numeric_limits<std::uint64_t>::max()) return std::nullopt;
  }
  u128 frac = 0, frac_scale = 1;
  std::size_t frac_digits = 0;
  if (i < t.size() && t[i] == '.') {
    for (++i; i < t.size() && std::isdigit(static_cast<unsigned char>(t[i])); ++i, ++frac_digits) {
      if (frac_digits >= 18) continue;  // further digits cannot change a whole byte count
      frac = frac * 10 + static_cast<unsigned>(t[i] - '0');
      frac_scale *= 10;
    }
    if (frac_digits == 0) return std::nullopt;
  }
  if (whole_digits == 0 && frac_digits == 0) return std::nullopt;

  std::string_view unit = trim(t.substr(i));
  u128 mult = 1;
  if (!unit.empty()) {
    switch (std::toupper(static_cast<unsigned char>(unit.front()))) {
      case 'K':
        mult = u128{1} << 10;
        break;
      case 'M':
        mult = u128{1} << 20;
        break;
      case 'G':
        mult = u128{1} << 30;
        break;
      case 'T':
        mult = u128{1} << 40;
        break;
      case 'B':
        mult = 1;
        break;
      default:
        return std::nullopt;
    }
    if (mult != 1) {
      unit.remove_prefix(1);
      if (iequals(unit, "iB") || iequals(unit, "B")) unit = {};
    } else {
      unit.remove_prefix(1);  // a lone "B"
    }
    if (!unit.empty()) return std::nullopt;
  }
  if (frac_digits > 0 && mult == 1) return std::nullopt;  // "1.5" bytes is not a byte count
  const u128 total = whole * mult + frac * mult / frac_scale;
  if (total > std::numeric_limits<std::uint64_t>::max()) return std::nullopt;
  return static_cast<std::uint64_t>(total);
}

}  // namespace tandem::settings
