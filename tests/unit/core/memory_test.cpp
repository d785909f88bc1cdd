// core::process_memory() against memory this test touches itself: private pages count as
// resident, shared-memory pages as resident and shared, and the peak never falls below.

#include "core/memory.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <sys/mman.h>
#include <unistd.h>

namespace tandem::core {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

TEST(ProcessMemory, CountsPagesThisProcessTouches) {
  const ProcessMemory before = process_memory();
  ASSERT_GT(before.resident, 0u);
  EXPECT_GE(before.peak + 4 * kMiB, before.resident);

  // Anonymous memory of `bytes`, every page written.
  const auto touched = [](std::size_t bytes, int sharing) {
    void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, sharing | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED) std::memset(m, 1, bytes);
    return m;
  };
  constexpr std::size_t kPrivate = 64 * kMiB;
  void* p = touched(kPrivate, MAP_PRIVATE);
  ASSERT_NE(p, MAP_FAILED);
  const ProcessMemory with_private = process_memory();
  EXPECT_GE(with_private.resident, before.resident + kPrivate * 3 / 4);
  EXPECT_GE(with_private.peak + 4 * kMiB, with_private.resident);

  constexpr std::size_t kShared = 16 * kMiB;
  void* s = touched(kShared, MAP_SHARED);
  ASSERT_NE(s, MAP_FAILED);
  const ProcessMemory with_shared = process_memory();
  EXPECT_GE(with_shared.shared, before.shared + kShared * 3 / 4);
  EXPECT_GE(with_shared.resident, with_private.resident + kShared * 3 / 4);

  ::munmap(p, kPrivate);
  ::munmap(s, kShared);
  const ProcessMemory after = process_memory();
  EXPECT_LT(after.resident, with_shared.resident - kPrivate / 2);
  // The kernel folds its per-thread counters into the peak lazily: a few pages behind.
  EXPECT_GE(after.peak + 4 * kMiB, with_shared.resident);
}

}  // namespace
}  // namespace tandem::core
