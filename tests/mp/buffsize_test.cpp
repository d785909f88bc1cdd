// TANDEM_BUFFSIZE's effect: the shared-memory channel between two ranks of a host is that big,
// as the segments mapped in each rank's address space show (/proc/self/maps), and a message
// many times larger than a small channel still arrives whole.

#include "mp_util.hpp"
#include "transport/bootstrap.hpp"
#include "transport/mesh.hpp"
#include "transport/shm/wire.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tandem::mptest {
namespace {

// Sizes of this process's mappings of tandem's channel segments (names /tandem-*-shm-*).
std::vector<std::size_t> channel_segments() {
  std::ifstream maps("/proc/self/maps");
  std::vector<std::size_t> sizes;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("/dev/shm/tandem-") == std::string::npos) continue;
    std::istringstream in(line);
    std::string range;
    in >> range;
    const auto dash = range.find('-');
    const auto begin = std::stoull(range.substr(0, dash), nullptr, 16);
    const auto end = std::stoull(range.substr(dash + 1), nullptr, 16);
    sizes.push_back(static_cast<std::size_t>(end - begin));
  }
  return sizes;
}

TEST(BuffSize, SetsTheSharedMemoryChannelsSize) {
  // 16K: slots of 256 bytes, smaller than a small area (1000 B messages go in chunks).
  for (const char* buffsize : {"16K", "64K", "4M"}) {
    const auto exits = testing::run_ranks(
        2,
        [&](const testing::RankContext& ctx) {
          auto comm = connect(ctx);
          std::vector<float> v(3u << 20, 1.0f);  // 12 MiB: many laps of a 64 KiB channel
          comm->allreduce(BufferView::of(std::span<float>(v)), ReduceOp::sum);
          EXPECT_EQ(v.front(), 2.0f);
          EXPECT_EQ(v.back(), 2.0f);
          std::vector<float> small(250);
          for (std::size_t i = 0; i < small.size(); ++i)
            small[i] = static_cast<float>(i * 2 + static_cast<std::size_t>(ctx.rank));
          for (int k = 0; k < 70; ++k)  // more than a lap of the 64 slots
            comm->allreduce(BufferView::of(std::span<float>(small)), ReduceOp::max);
          for (std::size_t i = 0; i < small.size(); ++i)
            ASSERT_EQ(small[i], static_cast<float>(i * 2 + 1)) << buffsize << " element " << i;
          const std::size_t bytes = transport::shm_buffer_setting();
          const std::size_t want =
              transport::shm::segment_bytes(1, transport::shm::geometry_for(bytes));
          const auto sizes = channel_segments();
          ASSERT_FALSE(sizes.empty()) << "no channel segment mapped";
          // Each segment is mapped whole once (and its parts again): the largest mapping is
          // the segment, a little more than one channel of TANDEM_BUFFSIZE (its headers and
          // the 64 slots' small areas besides).
          EXPECT_EQ(*std::max_element(sizes.begin(), sizes.end()), want) << buffsize;
          EXPECT_GE(want, bytes);
          EXPECT_LT(want, bytes + 64 * transport::shm::kSmallBytes + (64u << 10));
        },
        run_options("shm", {std::string("TANDEM_BUFFSIZE=") + buffsize}));
    testing::expect_all_ok(exits);
  }
}

// TANDEM_BUFFSIZE=auto with 8 host peers: each channel is 2 MiB (28 MiB over 8, a power of
// two), not 4 MiB, and collectives over every peer still arrive whole.
TEST(BuffSize, AutoSharesABudgetAmongManyHostPeers) {
  constexpr int kRanks = 9;
  const auto exits = testing::run_ranks(
      kRanks,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        std::vector<float> v(1u << 20, 1.0f);  // 4 MiB: two laps of a 2 MiB channel
        comm->allreduce(BufferView::of(std::span<float>(v)), ReduceOp::sum);
        EXPECT_EQ(v.front(), static_cast<float>(kRanks));
        EXPECT_EQ(v.back(), static_cast<float>(kRanks));
        std::vector<float> all(kRanks * 1000);
        std::vector<float> mine(1000, static_cast<float>(ctx.rank));
        comm->allgather(BufferView::of(std::span<float>(mine)),
                        BufferView::of(std::span<float>(all)));
        for (int r = 0; r < kRanks; ++r)
          ASSERT_EQ(all[static_cast<std::size_t>(r) * 1000 + 999], static_cast<float>(r));
        const std::size_t channel = transport::shm_channel_bytes(kRanks - 1);
        EXPECT_EQ(channel, std::size_t{2} << 20);
        const auto sizes = channel_segments();
        ASSERT_FALSE(sizes.empty()) << "no channel segment mapped";
        EXPECT_EQ(*std::max_element(sizes.begin(), sizes.end()),
                  transport::shm::segment_bytes(kRanks - 1, transport::shm::geometry_for(channel)));
      },
      run_options("shm", {"TANDEM_BUFFSIZE=auto"}));
  testing::expect_all_ok(exits);
}

}  // namespace
}  // namespace tandem::mptest
