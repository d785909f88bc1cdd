#pragma once
// Futex on a word in a MAP_SHARED segment. The calls are deliberately not
// FUTEX_PRIVATE_FLAG: waiter and waker are different processes, and the kernel keys a
// shared futex by (inode, offset), which both mappings agree on.

#include <climits>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace tandem::core {

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

/// Sleeps while `*word == expected`, at most `timeout`. Spurious returns are fine: callers
/// re-check their condition.
inline void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                       std::chrono::nanoseconds timeout) noexcept {
  const auto ns = timeout.count() < 0 ? 0 : timeout.count();
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr,
            0);
}

/// Wakes every process sleeping on `word`.
inline void futex_wake_all(std::atomic<std::uint32_t>* word) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr,
            nullptr, 0);
}

/// Asymmetric fences (membarrier(2), Linux 4.16+). In a Dekker pair (publish, then look at
/// the other side's flag) a full fence on the hot side is a large share of a small message's
/// cost (docs/benchmarks-small.md). When both processes registered, the hot side may use a
/// compiler barrier only and the cold side (a rank about to sleep) calls heavy_fence(), which
/// makes every thread of every registered process pass a full barrier. Registers this
/// process on the first call; true when it is registered and heavy_fence() works.
inline bool asymmetric_fences() noexcept {
  static const bool ready = [] {
    const long cmds = ::syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    constexpr long kNeed =
        MEMBARRIER_CMD_GLOBAL_EXPEDITED | MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED;
    return cmds >= 0 && (cmds & kNeed) == kNeed &&
           ::syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0;
  }();
  return ready;
}

/// The cold side's fence of an asymmetric pair (only when asymmetric_fences() is true).
inline void heavy_fence() noexcept {
  ::syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0);
}

/// The body of a spin loop: tells the core that this is a busy wait.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace tandem::core
