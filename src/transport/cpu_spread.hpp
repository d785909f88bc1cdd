#pragma once
// Ranks of one host that the scheduler left on one CPU take turns on it: every exchange then
// costs a context switch (docs/topology.md), and Linux's load balancer does not separate them,
// since both always look cache-hot to it. A waiting rank that gave its CPU away and finds a peer
// waiting on that same CPU (over shared memory, where the peers publish their CPU; over TCP
// on one host, where they cannot, the yield that gave the CPU away is the sign) moves itself
// to its own CPU of those it may run on (the local_index-th), then allows all of them again:
// no binding stays behind, and the rank that is already on its own CPU stays where it is.

#include <tandem/types.hpp>

#include <chrono>

namespace tandem::transport {

class CpuSpread {
 public:
  /// This rank is the `local_index`-th (from 0) of `local_count` ranks on its host.
  CpuSpread(int local_index, int local_count) noexcept
      : local_index_(local_index), local_count_(local_count) {}

  /// Called by the waiting thread, running on `cpu`, when a peer waits on the same CPU. Moves
  /// the thread to its own CPU when it may run on at least as many CPUs as the host has
  /// ranks and is not there yet; at most once per kRetry (a look that moves nothing starts no
  /// pause). Returns the CPU it moved to, or -1.
  int move_off(int cpu) noexcept;

  static constexpr Clock::duration kRetry = std::chrono::milliseconds(20);

  /// Moves made so far by this process (all communicators), for tests and reports.
  static int moves() noexcept;

 private:
  int local_index_;
  int local_count_;
  Clock::time_point next_try_{};
};

}  // namespace tandem::transport
