#pragma once
// The monotonic clock as of the last timer tick (CLOCK_MONOTONIC_COARSE): several times cheaper
// to read than the precise clock on a VM (docs/benchmarks-small.md), at the price of a few
// milliseconds of resolution. It is the clock Clock (std::chrono::
// steady_clock) reads, never ahead of it, so the two mix: a deadline counted from a coarse
// reading is at most one tick early, which no timeout of seconds notices.

#include <tandem/types.hpp>

#include <chrono>
#include <time.h>

namespace tandem::core {

inline Clock::time_point coarse_now() noexcept {
  timespec ts{};
  if (::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0) return Clock::now();
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(
      std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec)));
}

}  // namespace tandem::core
