// CpuSpread::move_off on this thread, with real affinity calls: which rank moves, and that a
// look that moves nothing does not hold back the next one. (Two ranks that met on one CPU
// right after such a look used to stay together for the 20 ms pause: a whole short run.)
// The multi-process outcome is tests/mp/placement_test.cpp.

#include "transport/cpu_spread.hpp"

#include "support/affinity.hpp"

#include <gtest/gtest.h>

namespace tandem::transport::test {
namespace {

// The thread's affinity for the test's length, restored after it.
class Affinity : public ::testing::Test {
 protected:
  void SetUp() override {
    if (affinity_.cpus().size() < 2) GTEST_SKIP() << "needs 2 CPUs (this process may use 1)";
    cpus_[0] = affinity_.cpus()[0];
    cpus_[1] = affinity_.cpus()[1];
  }
  void TearDown() override { affinity_.allow_all(); }

  void pin(int cpu) const { ASSERT_TRUE(affinity_.pin(cpu)); }
  void allow_all() const { ASSERT_TRUE(affinity_.allow_all()); }
  bool allows_all() const { return affinity_.allows_all(); }

  testing::CpuAffinity affinity_;
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
  CpuSpread spread(1, static_cast<int>(affinity_.cpus().size()) + 1);
  pin(cpus_[0]);
  allow_all();
  EXPECT_EQ(spread.move_off(cpus_[0]), -1);
  EXPECT_TRUE(allows_all());
}

}  // namespace
}  // namespace tandem::transport::test
