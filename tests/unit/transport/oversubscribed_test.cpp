// TANDEM_SPIN_US=auto: whether the ranks of a host outnumber the CPUs they may run on, from the
// affinity mask, or every online CPU when a launcher bound the rank to one CPU.

#include "transport/mesh.hpp"

#include <gtest/gtest.h>

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

namespace tandem::transport {
namespace {

TEST(Oversubscribed, MoreRanksThanTheAffinityMaskAllows) {
  int cpus = 0;
  EXPECT_FALSE(oversubscribed(1, &cpus));
  ASSERT_GE(cpus, 1);
  EXPECT_FALSE(oversubscribed(cpus));
  EXPECT_TRUE(oversubscribed(cpus + 1));
  EXPECT_TRUE(oversubscribed(32 * cpus));
}

// A rank bound to one CPU counts every online CPU: its launcher gave each rank a CPU of its own.
TEST(Oversubscribed, ARankBoundToOneCpuCountsTheOnlineCpus) {
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  ASSERT_GE(online, 1);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(static_cast<int>(::sched_getcpu() < 0 ? 0 : ::sched_getcpu()), &one);
    if (::sched_setaffinity(0, sizeof one, &one) != 0) ::_exit(10);
    int cpus = 0;
    const bool over = oversubscribed(static_cast<int>(online), &cpus);
    ::_exit(cpus == online && !over ? 0 : 11);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: could not bind; 11: counted the mask, not the host";
}

}  // namespace
}  // namespace tandem::transport
