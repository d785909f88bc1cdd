// The α–β–γ model behind the allreduce choice at larger worlds (algorithms/model.hpp): its
// costs against the closed forms, the crossovers it implies, and the choice the selector
// makes from it.

#include "algorithms/model.hpp"

#include "algorithms/algorithm.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <string_view>

namespace tandem::algorithms {
namespace {

constexpr model::LinkCost kUnit{1000.0, 1.0, 0.5};

// The largest power of two at which Rabenseifner still beats the ring, or 0.
std::size_t log_step_limit(int n, const model::LinkCost& c) {
  std::size_t last = 0;
  for (std::size_t b = 1; b <= (std::size_t{1} << 40); b *= 2)
    if (model::prefer_log_steps(n, b, c)) last = b;
  return last;
}

TEST(Model, CostsAreTheClosedForms) {
  // Ring: 2(n-1) steps of bytes/n. 8 ranks, 800 B: 14 x 1000 + 14/8 x 800 x 1.
  EXPECT_DOUBLE_EQ(model::ring_allreduce(8, 800, kUnit), 14000.0 + 1400.0);
  // Rabenseifner on 8: 6 steps, 2 x 7/8 of the bytes moved, 7/8 reduced.
  EXPECT_DOUBLE_EQ(model::rabenseifner_allreduce(8, 800, kUnit), 6000.0 + 1400.0 + 350.0);
  // On 6 (p = 4): 4 steps, 2 x 3/4 moved, 3/4 reduced, plus the fold: 2 steps, 2x moved, 1x
  // reduced.
  EXPECT_DOUBLE_EQ(model::rabenseifner_allreduce(6, 800, kUnit),
                   4000.0 + 1200.0 + 300.0 + 2000.0 + 1600.0 + 400.0);
  // Tree on 5: 3 levels up and down with the whole message, reduced at each level.
  EXPECT_DOUBLE_EQ(model::tree_allreduce(5, 800, kUnit), 6 * (1000.0 + 800.0) + 3 * 400.0);
  EXPECT_EQ(model::ring_allreduce(1, 800, kUnit), 0.0);
}

TEST(Model, LogStepsWinBelowACrossoverThatGrowsWithTheWorld) {
  for (const auto& c : {model::kShm, model::kTcp}) {
    // Two ranks: both algorithms are one exchange of halves each way; Rabenseifner's
    // reduction after the transfer makes it the slower.
    EXPECT_EQ(log_step_limit(2, c), 0u);
    std::size_t previous = 0;
    for (int n : {8, 16, 64, 256, 1024, 16384}) {
      const std::size_t limit = log_step_limit(n, c);
      EXPECT_GT(limit, previous) << n << " ranks";
      // Above the crossover the ring's overlap wins at every size.
      for (std::size_t b = limit * 2; b <= (std::size_t{1} << 40); b *= 2)
        EXPECT_FALSE(model::prefer_log_steps(n, b, c)) << n << " ranks, " << b << " B";
      previous = limit;
    }
  }
  // A slower step moves it up: TCP's crossover is above shared memory's.
  EXPECT_GT(log_step_limit(16, model::kTcp), log_step_limit(16, model::kShm));
}

TEST(Model, SizesOfOneSizeClassGetOneAnswer) {
  for (int n : {8, 16, 64}) {
    for (std::size_t b = 1024; b <= (std::size_t{1} << 24); b *= 2) {
      const bool at = model::prefer_log_steps(n, b, model::kShm);
      EXPECT_EQ(model::prefer_log_steps(n, b + b / 3, model::kShm), at) << n << " " << b;
      EXPECT_EQ(model::prefer_log_steps(n, 2 * b - 1, model::kShm), at) << n << " " << b;
    }
  }
}

TEST(Model, TreeBetweenHostsOnlyForSmallBlocksOnFourHostsOrMore) {
  for (int hosts : {2, 3})
    for (std::size_t b = 1; b <= (std::size_t{1} << 30); b *= 4)
      EXPECT_FALSE(model::prefer_tree_between_hosts(hosts, b, model::kTcp)) << hosts << " " << b;
  EXPECT_TRUE(model::prefer_tree_between_hosts(4, 1024, model::kTcp));
  EXPECT_FALSE(model::prefer_tree_between_hosts(4, 16 << 20, model::kTcp));
  EXPECT_TRUE(model::prefer_tree_between_hosts(64, 256 << 10, model::kTcp));
}

// The selector follows the model between recursive doubling (small) and direct (large).
TEST(Model, SelectorTakesRabenseifnerWhereTheModelSaysOnOneHost) {
  static float dummy[2];
  const auto choice = [](int world, std::size_t bytes) {
    Call c;
    c.kind = CollectiveKind::allreduce;
    c.in = BufferView::raw(&dummy[0], bytes / 4, DataType::f32);
    c.out = BufferView::raw(&dummy[1], bytes / 4, DataType::f32);
    return Registry::builtin().default_choice(c, world).name();
  };
  for (int world : {4, 8, 16, 64, 256}) {
    for (std::size_t b = 16 << 10; b < (1u << 20); b *= 2) {
      const std::string_view want =
          model::prefer_log_steps(world, b, model::kShm) ? "rabenseifner" : "ring";
      EXPECT_EQ(choice(world, b), want) << world << " ranks, " << b << " B";
    }
  }
  EXPECT_EQ(choice(4, 16 << 10), "ring");           // a few ranks: the ring's steps are few
  EXPECT_EQ(choice(64, 16 << 10), "rabenseifner");  // 126 ring steps against 12
  EXPECT_EQ(choice(64, 8 << 10), "recursive_doubling");
  EXPECT_EQ(choice(64, 1 << 20), "direct");
}

}  // namespace
}  // namespace tandem::algorithms
