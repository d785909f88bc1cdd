#include <tandem/log.hpp>
#include <tandem/settings.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <mutex>
#include <string>
#include <unistd.h>
#include <vector>

namespace tandem::log {
namespace {

constexpr std::array<std::string_view, static_cast<std::size_t>(Subsys::count_)> kSubsysNames{
    "INIT", "STORE", "SHM", "TCP", "COLL", "ALGO", "RUN", "PERF", "DDP", "DATA"};
constexpr std::uint32_t kAllSubsys = (1u << static_cast<unsigned>(Subsys::count_)) - 1;

// -1 until the environment has been read; then the highest Level printed.
std::atomic<int> g_level{-1};
std::atomic<std::uint32_t> g_subsys{kAllSubsys};
std::atomic<int> g_rank{-1};
std::atomic<int> g_world{-1};
std::mutex g_load_mutex;

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string_view level_name(Level l) noexcept {
  switch (l) {
    case Level::warn:
      return "WARN";
    case Level::info:
      return "INFO";
    case Level::detail:
      return "DETAIL";
  }
  return "?";
}

// NCCL_DEBUG_SUBSYS semantics: a list of names, or ALL; a leading ^ turns the whole list
// into exclusions ("^SHM,TCP"); a ^ on a later name excludes that name.
std::uint32_t parse_subsys(std::string_view spec, std::vector<std::string>& unknown) {
  spec = trim(spec);
  const bool invert = !spec.empty() && spec.front() == '^';
  if (invert) spec.remove_prefix(1);
  std::uint32_t mask = invert ? kAllSubsys : 0;
  while (!spec.empty()) {
    const auto comma = spec.find(',');
    std::string_view tok = trim(spec.substr(0, comma));
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    bool exclude = invert;
    if (!tok.empty() && tok.front() == '^') {
      exclude = true;
      tok = trim(tok.substr(1));
    }
    if (tok.empty()) continue;
    const std::string name = upper(tok);
    std::uint32_t bits = 0;
    if (name == "ALL") bits = kAllSubsys;
    for (std::size_t i = 0; i < kSubsysNames.size(); ++i)
      if (kSubsysNames[i] == name) bits = 1u << i;
    if (bits == 0) {
      unknown.push_back(std::string(tok));
      continue;
    }
    mask = exclude ? (mask & ~bits) : (mask | bits);
  }
  return mask;
}

void write_all(const std::string& line) noexcept {
  const char* p = line.data();
  std::size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nowhere to report a failing stderr
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

const std::string& host_name() {
  static const std::string name = [] {
    std::array<char, 256> buf{};
    if (::gethostname(buf.data(), buf.size() - 1) != 0) return std::string("unknown-host");
    return std::string(buf.data());
  }();
  return name;
}

void load() noexcept {
  std::vector<std::string> warnings;
  int level = static_cast<int>(Level::warn);
  std::uint32_t mask = kAllSubsys;
  try {
    const std::string lv = upper(trim(settings::get_string("TANDEM_DEBUG")));
    if (lv == "INFO")
      level = static_cast<int>(Level::info);
    else if (lv == "DETAIL")
      level = static_cast<int>(Level::detail);
    else if (lv != "WARN")
      warnings.push_back(fmt::format(
          "TANDEM_DEBUG='{}' is not a log level (WARN, INFO or DETAIL); using WARN", lv));
    std::vector<std::string> unknown;
    mask = parse_subsys(settings::get_string("TANDEM_DEBUG_SUBSYS"), unknown);
    if (!unknown.empty())
      warnings.push_back(fmt::format(
          "TANDEM_DEBUG_SUBSYS names unknown subsystem(s) {} (known: ALL, {}); ignored them",
          fmt::join(unknown, ", "), fmt::join(kSubsysNames, ", ")));
  } catch (...) {
    warnings.emplace_back("could not read TANDEM_DEBUG / TANDEM_DEBUG_SUBSYS; using WARN, ALL");
  }
  g_subsys.store(mask, std::memory_order_relaxed);
  g_level.store(level, std::memory_order_release);
  for (const auto& w : warnings) write(Level::warn, Subsys::init, w);
}

}  // namespace

std::string_view to_string(Subsys s) noexcept {
  const auto i = static_cast<std::size_t>(s);
  return i < kSubsysNames.size() ? kSubsysNames[i] : std::string_view("?");
}

bool enabled(Level level, Subsys subsys) noexcept {
  int current = g_level.load(std::memory_order_acquire);
  if (current < 0) [[unlikely]] {
    const std::lock_guard lock(g_load_mutex);
    if (g_level.load(std::memory_order_acquire) < 0) load();
    current = g_level.load(std::memory_order_acquire);
  }
  // Warnings are never filtered by subsystem: the filter quiets chatter, not problems.
  return static_cast<int>(level) <= current &&
         (level == Level::warn ||
          (g_subsys.load(std::memory_order_relaxed) >> static_cast<unsigned>(subsys) & 1u) != 0);
}

void set_rank(int rank, int world_size) noexcept {
  g_world.store(world_size, std::memory_order_relaxed);
  g_rank.store(rank, std::memory_order_relaxed);
}

void reload_from_env() noexcept {
  const std::lock_guard lock(g_load_mutex);
  load();
}

void write(Level level, Subsys subsys, std::string_view message) noexcept {
  try {
    const int rank = g_rank.load(std::memory_order_relaxed);
    const int world = g_world.load(std::memory_order_relaxed);
    std::string line;
    line.reserve(64 + message.size());
    if (rank >= 0)
      fmt::format_to(std::back_inserter(line), "[tandem rank {}/{} {}:{}] ", rank, world,
                     host_name(), ::getpid());
    else
      fmt::format_to(std::back_inserter(line), "[tandem rank ? {}:{}] ", host_name(), ::getpid());
    fmt::format_to(std::back_inserter(line), "{} {} ", level_name(level), to_string(subsys));
    // One record per line: a trailing newline in the message is not doubled.
    if (!message.empty() && message.back() == '\n') message.remove_suffix(1);
    line.append(message);
    line.push_back('\n');
    write_all(line);
  } catch (...) {
    // Out of memory while logging: drop the line rather than fail the caller.
  }
}

}  // namespace tandem::log
