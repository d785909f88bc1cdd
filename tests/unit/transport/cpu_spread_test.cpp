// CpuSpread::move_off on this thread, with real affinity calls: which rank moves, and that a
// look that moves nothing does not hold back the next one. (Two ranks that met on one CPU
// right after such a look used to stay together for the 20 ms pause: a whole short run.)
// The multi-process outcome is tests/mp/placement_test.cpp.

#include "transport/cpu_spread.hpp"

#include <gtest/gtest.h>

#include <sched.h>

namespace tandem::transport::test {
namespace {

// The thread's affinity for the test's length, restored after it.
class Affinity : public ::testing::Test {
 protected:
  void SetUp() override {
    CPU_ZERO(&all_);
    ASSERT_EQ(::sched_getaffinity(0, sizeof all_, &all_), 0);
    if (CPU_COUNT(&all_) < 2) GTEST_SKIP() << "needs 2 CPUs (this process may use 1)";
    for (int c = 0, k = 0; c < CPU_SETSIZE && k < 2; ++c)
      if (CPU_ISSET(c, &all_)) cpus_[k++] = c;
  }
  void TearDown() override { ::sched_setaffinity(0, sizeof all_, &all_); }

  void pin(int cpu) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
  }
  void allow_all() { ASSERT_EQ(::sched_setaffinity(0, sizeof all_, &all_), 0); }
  bool allows_all() const {
    cpu_set_t now;
    CPU_ZERO(&now);
    return ::sched_getaffinity(0, sizeof now, &now) == 0 && CPU_EQUAL(&now, &all_);
  }

  cpu_set_t all_{};
  int cpus_[2] = {-1, -1};  // the first two CPUs this thread may use
};

TEST_F(Affinity, ALookWhileBoundToOneCpuDoesNotDelayTheMoveOnceAllowed) {
  // Rank 1 of 2 on this host: its own CPU is the second allowed one.
  CpuSpread spread(1, 2);
  pin(cpus_[0]);
  EXPECT_EQ(spread.move_off(cpus_[0]), -1) << "bound to one CPU: nowhere to move";
  allow_all();
  const int before = CpuSpread::moves();
  EXPECT_EQ(spread.move_off(cpus_[0]), cpus_[1]);
  EXPECT_EQ(CpuSpread::moves(), before + 1);
  EXPECT_TRUE(allows_all()) << "the move left a binding behind";
}

TEST_F(Affinity, TheRankOnItsOwnCpuStaysAndItsLookDoesNotDelayALaterMove) {
  // Rank 0 of 2: its own CPU is the first allowed one.
  CpuSpread spread(0, 2);
  pin(cpus_[0]);
  allow_all();
  EXPECT_EQ(spread.move_off(cpus_[0]), -1) << "already on its own CPU: the peer moves";
  EXPECT_TRUE(allows_all());
  // Later both meet on the other CPU: this rank moves back to its own at once.
  pin(cpus_[1]);
  allow_all();
  const auto moved_at = Clock::now();
  EXPECT_EQ(spread.move_off(cpus_[1]), cpus_[0]);
  EXPECT_TRUE(allows_all());
  // A second move within kRetry of the first is refused (no ping-pong with the kernel's
  // balancer); checked only when this thread got here within kRetry.
  pin(cpus_[1]);
  allow_all();
  const int again = spread.move_off(cpus_[1]);
  if (Clock::now() - moved_at < CpuSpread::kRetry) {
    EXPECT_EQ(again, -1);
  }
}

TEST_F(Affinity, MoreRanksThanAllowedCpusMoveNowhere) {
  CpuSpread spread(1, CPU_COUNT(&all_) + 1);
  pin(cpus_[0]);
  allow_all();
  EXPECT_EQ(spread.move_off(cpus_[0]), -1);
  EXPECT_TRUE(allows_all());
}

}  // namespace
}  // namespace tandem::transport::test
