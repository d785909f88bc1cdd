#include "transport/cpu_spread.hpp"

#include <atomic>
#include <sched.h>

namespace tandem::transport {
namespace {
std::atomic<int> g_moves{0};
}

int CpuSpread::moves() noexcept {
  return g_moves.load(std::memory_order_relaxed);
}

int CpuSpread::move_off(int cpu) noexcept {
  const auto now = Clock::now();
  // Only a move starts the pause. A look that moves nothing (this rank already on its own
  // CPU, or bound to one) must not hold back the next: two ranks that meet on one CPU within
  // kRetry of it would take turns there for as long, a whole short run (docs/topology.md).
  if (now < next_try_) return -1;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0) return -1;
  // Bound to one CPU, or more ranks than CPUs: there is nowhere to spread to.
  if (CPU_COUNT(&allowed) < 2 || CPU_COUNT(&allowed) < local_count_) return -1;
  int own = -1;
  for (int c = 0, k = 0; c < CPU_SETSIZE && own < 0; ++c)
    if (CPU_ISSET(c, &allowed) && k++ == local_index_) own = c;
  if (own < 0 || own == cpu) return -1;  // already on its own CPU: the peer moves
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(own, &one);
  next_try_ = now + kRetry;
  // The first call migrates this thread at once; the second, whose set includes the CPU it
  // now runs on, moves nothing and leaves the scheduler free again.
  if (::sched_setaffinity(0, sizeof one, &one) != 0) return -1;
  ::sched_setaffinity(0, sizeof allowed, &allowed);
  g_moves.fetch_add(1, std::memory_order_relaxed);
  return own;
}

}  // namespace tandem::transport
