// core::copy: ordinary and streaming copies of every awkward size and alignment, on every
// instruction set, against the bytes themselves; and when a destination streams.

#include "core/copy.hpp"

#include "core/reduce.hpp"
#include "unit/core/targets.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace tandem::core {
namespace {

constexpr std::uint8_t kGuard = 0xA5;
constexpr std::size_t kPad = 64;

// Copies `bytes` from src + src_off to dst + dst_off and checks every byte copied and every
// guard byte around the destination untouched.
void check_copy(std::size_t bytes, std::size_t dst_off, std::size_t src_off, bool stream,
                std::mt19937_64& rng) {
  std::vector<std::uint8_t> src(bytes + src_off + kPad);
  for (auto& b : src) b = static_cast<std::uint8_t>(rng());
  std::vector<std::uint8_t> dst(bytes + dst_off + 2 * kPad, kGuard);
  copy(dst.data() + kPad + dst_off, src.data() + src_off, bytes, stream);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < bytes; ++i)
    wrong += dst[kPad + dst_off + i] != src[src_off + i] ? 1 : 0;
  std::size_t guards = 0;
  for (std::size_t i = 0; i < kPad + dst_off; ++i) guards += dst[i] != kGuard ? 1 : 0;
  for (std::size_t i = kPad + dst_off + bytes; i < dst.size(); ++i)
    guards += dst[i] != kGuard ? 1 : 0;
  EXPECT_EQ(wrong, 0u) << bytes << " bytes, dst +" << dst_off << ", src +" << src_off
                       << (stream ? ", streaming" : "");
  EXPECT_EQ(guards, 0u) << "bytes around the destination were written: " << bytes << " bytes, dst +"
                        << dst_off << (stream ? ", streaming" : "");
}

TEST(Copy, EverySizeAndAlignmentStreamingOrNot) {
  std::mt19937_64 rng(31337);
  for_each_target([&] {
    for (std::size_t bytes :
         {0, 1, 15, 16, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 1000, 4099, 65536 + 5})
      for (std::size_t dst_off : {0, 1, 7, 16, 32, 63})
        for (std::size_t src_off : {0, 3, 32})
          for (bool stream : {false, true}) {
            check_copy(bytes, dst_off, src_off, stream, rng);
            if (::testing::Test::HasFailure()) return;
          }
  });
}

TEST(Copy, StreamsFromTheThresholdUp) {
  {
    const StreamThreshold t(4096);
    EXPECT_FALSE(streams(4095));
    EXPECT_TRUE(streams(4096));
    EXPECT_TRUE(streams(std::size_t{1} << 30));
  }
  // The default: the last-level cache, so a 64 KiB chunk of a small message never streams.
  EXPECT_TRUE(streams(stream_threshold()));
  EXPECT_FALSE(streams(std::size_t{64} << 10));
  const StreamThreshold off(SIZE_MAX);
  EXPECT_FALSE(streams(std::size_t{1} << 40));
}

}  // namespace
}  // namespace tandem::core
