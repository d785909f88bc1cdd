// TANDEM_BUFFSIZE=auto (transport::shm_channel_bytes): a rank's channels share a fixed budget
// once it has more than 7 host peers, so that a host's shared memory grows with its ranks,
// not their square; an explicit size is taken as it is, and a malformed one is refused.

#include "support/scoped_env.hpp"
#include "transport/bootstrap.hpp"
#include "transport/mesh.hpp"

#include <tandem/error.hpp>

#include <gtest/gtest.h>

#include <bit>
#include <cstddef>

namespace tandem::transport {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

TEST(ShmChannelBytes, FullSizeUpToSevenPeersThenAShareOfTheBudget) {
  for (std::size_t peers = 1; peers <= 7; ++peers) EXPECT_EQ(shm_channel_bytes(peers), 4 * kMiB);
  EXPECT_EQ(shm_channel_bytes(8), 2 * kMiB);    // 28 MiB / 8 = 3.5 MiB, a power of two below
  EXPECT_EQ(shm_channel_bytes(15), 1 * kMiB);   // 1.87 MiB
  EXPECT_EQ(shm_channel_bytes(31), kMiB / 2);   // 0.9 MiB
  EXPECT_EQ(shm_channel_bytes(63), kMiB / 4);   // 0.44 MiB
  EXPECT_EQ(shm_channel_bytes(511), kMiB / 4);  // the floor
  for (std::size_t peers = 1; peers <= 1024; ++peers) {
    const std::size_t c = shm_channel_bytes(peers);
    EXPECT_TRUE(std::has_single_bit(c)) << peers;
    EXPECT_TRUE(peers * c <= 28 * kMiB || c == kMiB / 4) << peers;
    if (peers > 1) {
      EXPECT_LE(c, shm_channel_bytes(peers - 1)) << peers;
    }
  }
}

TEST(ShmChannelBytes, AHostsSegmentsGrowLinearlyUnderAuto) {
  // Every rank's segment stays near the budget: 64 ranks need about 64 x 28 MiB, not
  // 64 x 63 x 4 MiB.
  const std::size_t auto64 = shm_bytes_needed(64, 0);
  EXPECT_LT(auto64, 64 * 32 * kMiB);
  EXPECT_GT(auto64, 64 * 63 * (kMiB / 4));
  EXPECT_GT(shm_bytes_needed(64, 4 * kMiB), 64 * 63 * 4 * kMiB);
  EXPECT_EQ(shm_bytes_needed(8, 0), shm_bytes_needed(8, 4 * kMiB));
  EXPECT_EQ(shm_bytes_needed(1, 0), 0u);
}

TEST(ShmChannelBytes, TheSettingIsAutoOrASize) {
  {
    tandem::testing::ScopedEnv e("TANDEM_BUFFSIZE", nullptr);
    EXPECT_EQ(shm_buffer_setting(), 0u);
  }
  {
    tandem::testing::ScopedEnv e("TANDEM_BUFFSIZE", "512K");
    EXPECT_EQ(shm_buffer_setting(), kMiB / 2);
  }
  for (const char* bad : {"1K", "lots", "-4M"}) {
    tandem::testing::ScopedEnv e("TANDEM_BUFFSIZE", bad);
    try {
      shm_buffer_setting();
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& err) {
      EXPECT_EQ(err.code(), ErrorCode::InvalidArgument) << bad;
      EXPECT_NE(err.message().find("must be auto or a size"), std::string::npos) << err.message();
    }
  }
}

}  // namespace
}  // namespace tandem::transport
