#pragma once
/// @file log.hpp
/// One logger for all of tandem. Levels: WARN (default), INFO, DETAIL, chosen with
/// TANDEM_DEBUG; TANDEM_DEBUG_SUBSYS=INIT,STORE,... (or ALL, or ^X to exclude) filters
/// the INFO and DETAIL lines of subsystems (warnings always print). A leading ^ makes the
/// whole list exclusions, as NCCL_DEBUG_SUBSYS does: "^SHM,TCP". Every line goes to stderr as
///   [tandem rank R/W host:pid] LEVEL SUBSYS message
/// written with a single write(2) so that lines from threads never tear.

#include <fmt/format.h>

#include <cstdint>
#include <string_view>

namespace tandem::log {

enum class Level : std::uint8_t { warn = 0, info = 1, detail = 2 };

/// Subsystems a line may belong to (TANDEM_DEBUG_SUBSYS names, upper case).
enum class Subsys : std::uint8_t {
  init,
  store,
  shm,
  tcp,
  coll,
  algo,
  run,
  perf,
  ddp,
  data,
  count_
};

std::string_view to_string(Subsys s) noexcept;

/// True when a line of this level and subsystem would be printed (cheap; inline fast path).
bool enabled(Level level, Subsys subsys) noexcept;

/// Sets the rank shown in the prefix (called by the Communicator; -1 = unknown).
void set_rank(int rank, int world_size) noexcept;

/// Re-reads TANDEM_DEBUG / TANDEM_DEBUG_SUBSYS (tests; the first log call reads them).
void reload_from_env() noexcept;

/// Writes one line (the prefix is added here).
void write(Level level, Subsys subsys, std::string_view message) noexcept;

}  // namespace tandem::log

#define TANDEM_LOG(level, subsys, ...)                                                      \
  do {                                                                                      \
    if (::tandem::log::enabled(::tandem::log::Level::level, ::tandem::log::Subsys::subsys)) \
      ::tandem::log::write(::tandem::log::Level::level, ::tandem::log::Subsys::subsys,      \
                           ::fmt::format(__VA_ARGS__));                                     \
  } while (0)

#define TANDEM_WARN(subsys, ...) TANDEM_LOG(warn, subsys, __VA_ARGS__)
#define TANDEM_INFO(subsys, ...) TANDEM_LOG(info, subsys, __VA_ARGS__)
#define TANDEM_DETAIL(subsys, ...) TANDEM_LOG(detail, subsys, __VA_ARGS__)
