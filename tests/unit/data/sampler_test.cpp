// DistributedSampler: PyTorch's counts, padding and striding; permutations that depend on
// seed + epoch only; the resumable position.

#include <tandem/data.hpp>
#include <tandem/error.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

namespace tandem::data {
namespace {

std::vector<std::size_t> all_ranks(std::size_t n, int world, SamplerOptions o, std::uint64_t epoch,
                                   std::vector<std::vector<std::size_t>>* per_rank = nullptr) {
  std::vector<std::size_t> all;
  for (int r = 0; r < world; ++r) {
    DistributedSampler s(n, world, r, o);
    s.set_epoch(epoch);
    auto mine = s.indices();
    EXPECT_EQ(mine.size(), s.num_samples()) << "rank " << r;
    all.insert(all.end(), mine.begin(), mine.end());
    if (per_rank) per_rank->push_back(mine);
  }
  return all;
}

TEST(Sampler, CountsPaddingAndCoverage) {
  for (std::size_t n : {0u, 1u, 5u, 10u, 11u, 60000u}) {
    for (int world : {1, 2, 3, 7}) {
      for (bool shuffle : {true, false}) {
        for (bool drop_last : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "N=" << n << " R=" << world << " shuffle=" << shuffle
                                            << " drop_last=" << drop_last);
          const auto r = static_cast<std::size_t>(world);
          const SamplerOptions o{shuffle, 42, drop_last};
          const DistributedSampler s0(n, world, 0, o);
          const std::size_t expect = drop_last ? n / r : (n + r - 1) / r;
          EXPECT_EQ(s0.num_samples(), expect);
          EXPECT_EQ(s0.total_size(), expect * r);

          const auto all = all_ranks(n, world, o, 3);
          EXPECT_EQ(all.size(), expect * r);
          std::vector<std::size_t> times(n, 0);
          for (auto i : all) {
            ASSERT_LT(i, n);
            ++times[i];
          }
          if (drop_last) {
            // Every index at most once; exactly floor(N/R)*R distinct ones.
            EXPECT_TRUE(std::all_of(times.begin(), times.end(), [](auto t) { return t <= 1; }));
          } else {
            // Every index at least once; the padding repeats the epoch order from its start.
            EXPECT_TRUE(std::all_of(times.begin(), times.end(), [](auto t) { return t >= 1; }));
            const auto order = s0.epoch_order();
            ASSERT_EQ(order.size(), expect * r);
            for (std::size_t k = n; k < order.size(); ++k) EXPECT_EQ(order[k], order[k - n]);
            if (n % r == 0) {
              EXPECT_TRUE(std::all_of(times.begin(), times.end(), [](auto t) { return t == 1; }));
            }
          }
        }
      }
    }
  }
}

TEST(Sampler, RanksStrideThroughTheOrder) {
  // PyTorch without shuffling: N=10, R=3 pads with 0, 1 -> 12 indices, rank r takes r::3.
  std::vector<std::vector<std::size_t>> ranks;
  all_ranks(10, 3, {false, 0, false}, 0, &ranks);
  EXPECT_EQ(ranks[0], (std::vector<std::size_t>{0, 3, 6, 9}));
  EXPECT_EQ(ranks[1], (std::vector<std::size_t>{1, 4, 7, 0}));
  EXPECT_EQ(ranks[2], (std::vector<std::size_t>{2, 5, 8, 1}));
  ranks.clear();
  all_ranks(10, 3, {false, 0, true}, 0, &ranks);
  EXPECT_EQ(ranks[0], (std::vector<std::size_t>{0, 3, 6}));
  EXPECT_EQ(ranks[1], (std::vector<std::size_t>{1, 4, 7}));
  EXPECT_EQ(ranks[2], (std::vector<std::size_t>{2, 5, 8}));
  // N=1 on 7 ranks: every rank gets index 0.
  ranks.clear();
  all_ranks(1, 7, {true, 0, false}, 0, &ranks);
  for (const auto& r : ranks) EXPECT_EQ(r, std::vector<std::size_t>{0});

  // With shuffling, each rank's list is the same stride through the shared order.
  DistributedSampler s(23, 4, 2, {true, 9, false});
  s.set_epoch(5);
  const auto order = s.epoch_order();
  const auto mine = s.indices();
  for (std::size_t k = 0; k < mine.size(); ++k) EXPECT_EQ(mine[k], order[2 + 4 * k]);
}

TEST(Sampler, EpochAndSeedChooseThePermutation) {
  const std::size_t n = 1000;
  DistributedSampler a(n, 2, 0), b(n, 2, 0);
  const auto e0 = a.epoch_order();
  EXPECT_EQ(e0, b.epoch_order()) << "same seed and epoch, same order";
  a.set_epoch(1);
  const auto e1 = a.epoch_order();
  EXPECT_NE(e0, e1) << "epochs 0 and 1 gave the same permutation";
  b.set_epoch(1);
  EXPECT_EQ(e1, b.epoch_order());
  EXPECT_EQ(e1, permutation(n, 0 + 1)) << "the order is permutation(N, seed + epoch)";
  DistributedSampler c(n, 2, 0, {true, 7, false});
  EXPECT_NE(c.epoch_order(), e0) << "another seed, another permutation";
  // seed + epoch is what matters, as in PyTorch.
  c.set_epoch(3);
  DistributedSampler d(n, 2, 0, {true, 8, false});
  d.set_epoch(2);
  EXPECT_EQ(c.epoch_order(), d.epoch_order());
  // A permutation, not merely a shuffle-ish list; not the identity.
  auto sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::size_t> identity(n);
  std::iota(identity.begin(), identity.end(), std::size_t{0});
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(e0, identity);
  // Without shuffling, in order whatever the epoch.
  DistributedSampler in_order(n, 1, 0, {false, 0, false});
  in_order.set_epoch(17);
  EXPECT_EQ(in_order.epoch_order(), identity);
}

TEST(Sampler, PermutationIsPinned) {
  // The generator is part of the checkpoint format (a resumed run must see the same order):
  // these values must never change.
  EXPECT_EQ(permutation(10, 0), (std::vector<std::size_t>{7, 8, 3, 1, 5, 4, 2, 0, 9, 6}));
  EXPECT_EQ(permutation(0, 5), std::vector<std::size_t>{});
  EXPECT_EQ(permutation(1, 5), std::vector<std::size_t>{0});
}

TEST(Sampler, PositionSaveAndRestore) {
  DistributedSampler s(103, 3, 1, {true, 11, false});
  s.set_epoch(4);
  EXPECT_EQ(s.position(), 0u);
  EXPECT_EQ(s.remaining(), s.indices());
  s.advance(10);
  const SamplerState saved = s.state();
  EXPECT_EQ(saved.epoch, 4u);
  EXPECT_EQ(saved.position, 10u);
  EXPECT_EQ(saved.seed, 11u);

  DistributedSampler resumed(103, 3, 1, {true, 11, false});
  resumed.load_state(saved);
  resumed.set_epoch(4);  // the training loop's set_epoch for the same epoch keeps the position
  EXPECT_EQ(resumed.position(), 10u);
  const auto all = s.indices();
  EXPECT_EQ(resumed.remaining(), std::vector<std::size_t>(all.begin() + 10, all.end()));
  resumed.set_epoch(5);
  EXPECT_EQ(resumed.position(), 0u) << "a new epoch starts at its beginning";

  s.advance(1000);
  EXPECT_EQ(s.position(), s.num_samples()) << "advance clamps";
  EXPECT_TRUE(s.remaining().empty());

  DistributedSampler other_seed(103, 3, 1, {true, 12, false});
  EXPECT_THROW(other_seed.load_state(saved), Error);
  DistributedSampler smaller(10, 3, 1, {true, 11, false});
  SamplerState far = saved;
  far.position = 5;
  EXPECT_THROW(smaller.load_state(far), Error);
}

// An elastic run resumed at another world size: the new ranks share exactly the samples of
// the epoch that no old rank consumed (the reference: the old ranks' own indices), padded or
// truncated as usual; the next epoch is whole again; a re-sharded state saves and restores.
TEST(Sampler, ResumedAtAnotherWorldSizeTheEpochGoesOnWithTheUnseenSamples) {
  for (std::size_t n : {103u, 60u, 7u}) {
    for (bool drop_last : {false, true}) {
      for (bool shuffle : {true, false}) {
        for (auto [from, to] : {std::pair{3, 2}, {2, 3}, {4, 1}, {1, 4}}) {
          const SamplerOptions o{shuffle, 5, drop_last};
          const std::string what = fmt::format("n {} drop_last {} shuffle {} world {} -> {}", n,
                                               drop_last, shuffle, from, to);
          std::set<std::size_t> consumed;
          SamplerState saved;
          for (int r = 0; r < from; ++r) {
            DistributedSampler old(n, from, r, o);
            old.set_epoch(2);
            const std::uint64_t p = old.num_samples() / 3;
            const auto mine = old.indices();
            consumed.insert(mine.begin(), mine.begin() + static_cast<std::ptrdiff_t>(p));
            old.advance(p);
            saved = old.state();
          }
          std::multiset<std::size_t> taken;
          std::size_t per_rank = 0;
          for (int r = 0; r < to; ++r) {
            DistributedSampler now(n, to, r, o);
            now.load_state(saved);
            now.set_epoch(2);
            const auto rest = now.remaining();
            if (r == 0) per_rank = rest.size();
            EXPECT_EQ(rest.size(), per_rank) << what << ": every rank the same count";
            EXPECT_EQ(rest.size(), now.num_samples()) << what;
            taken.insert(rest.begin(), rest.end());
            if (r == 0) {
              // Saved again after a step at the new size, restored exactly.
              now.advance(1);
              DistributedSampler again(n, to, r, o);
              again.load_state(now.state());
              again.set_epoch(2);
              EXPECT_EQ(again.remaining(), now.remaining()) << what;
              EXPECT_EQ(again.consumed(), now.consumed()) << what;
              again.set_epoch(3);
              DistributedSampler fresh(n, to, r, o);
              fresh.set_epoch(3);
              EXPECT_EQ(again.offset(), 0u) << what;
              EXPECT_EQ(again.indices(), fresh.indices()) << what << ": the next epoch is whole";
            }
          }
          std::set<std::size_t> unseen;
          for (std::size_t i = 0; i < n; ++i)
            if (!consumed.contains(i)) unseen.insert(i);
          const std::size_t left = consumed.size() >= n ? 0 : n - consumed.size();
          for (std::size_t i : taken)
            EXPECT_FALSE(consumed.contains(i)) << what << ": sample " << i << " seen twice";
          if (drop_last) {
            EXPECT_EQ(per_rank, left / static_cast<std::size_t>(to)) << what;
            EXPECT_EQ(std::set<std::size_t>(taken.begin(), taken.end()).size(), taken.size())
                << what << ": no padding with drop_last";
          } else {
            EXPECT_EQ(per_rank,
                      (left + static_cast<std::size_t>(to) - 1) / static_cast<std::size_t>(to))
                << what;
            EXPECT_EQ(std::set<std::size_t>(taken.begin(), taken.end()), unseen)
                << what << ": every unseen sample, once or as padding";
          }
        }
      }
    }
  }
}

TEST(Sampler, InvalidArguments) {
  EXPECT_THROW(DistributedSampler(10, 0, 0), Error);
  EXPECT_THROW(DistributedSampler(10, 2, 2), Error);
  EXPECT_THROW(DistributedSampler(10, 2, -1), Error);
}

}  // namespace
}  // namespace tandem::data
