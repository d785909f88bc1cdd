#include "core/futex.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <thread>

namespace tandem::core {
namespace {

enum : int { kNotStarted, kRunning, kRegistered, kUnavailable };

std::atomic<int> g_state{kNotStarted};
std::atomic<pid_t> g_registering_pid{0};  // the process whose thread runs the registration

bool register_now() noexcept {
  const long cmds = ::syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  constexpr long kNeed = MEMBARRIER_CMD_GLOBAL_EXPEDITED | MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED;
  return cmds >= 0 && (cmds & kNeed) == kNeed &&
         ::syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0;
}

void finish(bool registered) noexcept {
  g_state.store(registered ? kRegistered : kUnavailable, std::memory_order_release);
  g_state.notify_all();
}

}  // namespace

void start_fence_registration() noexcept {
  int expected = kNotStarted;
  if (!g_state.compare_exchange_strong(expected, kRunning, std::memory_order_acq_rel)) return;
  g_registering_pid.store(::getpid(), std::memory_order_release);
  try {
    std::thread([] { finish(register_now()); }).detach();
  } catch (...) {  // no thread to be had: register on this one
    finish(register_now());
  }
}

bool asymmetric_fences() noexcept {
  int state = g_state.load(std::memory_order_acquire);
  if (state == kRunning && g_registering_pid.load(std::memory_order_acquire) == ::getpid()) {
    while (state == kRunning) {
      g_state.wait(kRunning, std::memory_order_acquire);
      state = g_state.load(std::memory_order_acquire);
    }
  }
  if (state == kRegistered) return true;
  if (state == kUnavailable) return false;
  // Not started, or started by the parent of this forked child (its thread is not here):
  // registering again is harmless, so a race with a thread starting it too is as well.
  const bool registered = register_now();
  finish(registered);
  return registered;
}

bool futex_wait_any(std::span<const FutexWaiter> waiters,
                    std::chrono::nanoseconds timeout) noexcept {
#ifdef SYS_futex_waitv
  static std::atomic<bool> unsupported{false};
  if (waiters.empty() || waiters.size() > 128 || unsupported.load(std::memory_order_relaxed))
    return false;
  futex_waitv v[128] = {};
  for (std::size_t i = 0; i < waiters.size(); ++i) {
    v[i].val = waiters[i].expected;
    v[i].uaddr = reinterpret_cast<std::uintptr_t>(waiters[i].word);
    v[i].flags = FUTEX_32;  // not FUTEX_PRIVATE_FLAG: the words are in MAP_SHARED segments
  }
  timespec until{};
  ::clock_gettime(CLOCK_MONOTONIC, &until);
  const auto ns = std::max<std::int64_t>(timeout.count(), 0) + until.tv_nsec;
  until.tv_sec += static_cast<time_t>(ns / 1'000'000'000);
  until.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  if (::syscall(SYS_futex_waitv, v, waiters.size(), 0, &until, CLOCK_MONOTONIC) < 0 &&
      errno == ENOSYS) {
    unsupported.store(true, std::memory_order_relaxed);
    return false;
  }
  return true;
#else
  (void)waiters;
  (void)timeout;
  return false;
#endif
}

}  // namespace tandem::core
