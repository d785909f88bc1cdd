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
#include <span>
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

/// A word for futex_wait_any(): sleep while `*word == expected`.
struct FutexWaiter {
  std::atomic<std::uint32_t>* word;
  std::uint32_t expected;
};

/// Sleeps until any of `waiters` (at most 128) is woken or no longer holds its expected value,
/// at most `timeout` (futex_waitv(2), Linux 5.16+; shared futexes). Returns false, having
/// slept on nothing, where the kernel lacks futex_waitv: the caller then waits on one word.
bool futex_wait_any(std::span<const FutexWaiter> waiters,
                    std::chrono::nanoseconds timeout) noexcept;

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
/// process on the first call, or waits for the registration start_fence_registration()
/// began; true when it is registered and heavy_fence() works.
bool asymmetric_fences() noexcept;

/// Begins asymmetric_fences()'s registration on a thread of its own and returns at once. In a
/// process that already has threads the kernel makes registering wait for an RCU grace period
/// (10-25 ms here), so a communicator's setup starts it first and the wait overlaps the
/// rendezvous. Calls after the first do nothing. A child forked while the registration ran
/// registers itself at its own first asymmetric_fences().
void start_fence_registration() noexcept;

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
