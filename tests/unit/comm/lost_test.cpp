// ranks_named_lost: the ranks a PeerLost message names as lost, in the transport's words.
#include "comm/diag/lost.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tandem::comm {
namespace {

using Ranks = std::vector<int>;

TEST(RanksNamedLost, TheDeadRankAndTheOthersSeenLost) {
  EXPECT_EQ(ranks_named_lost("rank 2 (host a, pid 7) died or closed its connection (its "
                             "connection closed without a goodbye); this rank cannot complete "
                             "collectives without it. Also lost: rank 1 (host b, pid 8), rank 12 "
                             "(host c, pid 9)",
                             16),
            (Ranks{2, 1, 12}));
}

// A survivor that heard of the death from another survivor: that one relayed it, and is alive
// (nested when the report went through several ranks).
TEST(RanksNamedLost, NotTheRanksThatRelayedTheLoss) {
  EXPECT_EQ(ranks_named_lost("rank 2 (host vm, pid 9379) died or closed its connection (its "
                             "connection closed without a goodbye) (reported by rank 1 (host vm, "
                             "pid 9378), which lost it first) (reported by rank 0 (host vm, pid "
                             "9376), which lost it first)",
                             4),
            (Ranks{2}));
}

TEST(RanksNamedLost, EachOnceAndOnlyRanksOfThisCommunicator) {
  EXPECT_EQ(ranks_named_lost("rank 3 (host a, pid 1); rank 3 (host a, pid 1); rank 4 (host b, "
                             "pid 2); rank 99999999999999999999 (host c, pid 3)",
                             4),
            (Ranks{3}));
  EXPECT_EQ(ranks_named_lost("allreduce #3 failed: rank 1 left normally", 4), Ranks{});
  EXPECT_EQ(ranks_named_lost("", 4), Ranks{});
  EXPECT_EQ(ranks_named_lost("rank ", 4), Ranks{});
  EXPECT_EQ(ranks_named_lost("rank 1 (host", 4), Ranks{});
}

}  // namespace
}  // namespace tandem::comm
