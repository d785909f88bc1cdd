#pragma once
// This thread's CPU affinity for tests that move it: the CPUs it may use when the object is
// made, binding it to one of them, and allowing all of them again.

#include <sched.h>
#include <vector>

namespace tandem::testing {

class CpuAffinity {
 public:
  CpuAffinity() noexcept {
    CPU_ZERO(&all_);
    if (::sched_getaffinity(0, sizeof all_, &all_) != 0) CPU_ZERO(&all_);
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &all_)) cpus_.push_back(c);
  }

  /// The CPUs this thread could use when this was made, in order.
  const std::vector<int>& cpus() const noexcept { return cpus_; }

  /// Binds this thread to `cpu` alone (it runs there when this returns true).
  bool pin(int cpu) const noexcept {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    return ::sched_setaffinity(0, sizeof one, &one) == 0;
  }
  /// Allows this thread every CPU of cpus() again (it stays where it runs).
  bool allow_all() const noexcept { return ::sched_setaffinity(0, sizeof all_, &all_) == 0; }
  /// Whether this thread may use exactly the CPUs of cpus().
  bool allows_all() const noexcept {
    cpu_set_t now;
    CPU_ZERO(&now);
    return ::sched_getaffinity(0, sizeof now, &now) == 0 && CPU_EQUAL(&now, &all_);
  }

 private:
  cpu_set_t all_{};
  std::vector<int> cpus_;
};

}  // namespace tandem::testing
