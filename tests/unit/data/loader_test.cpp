// BatchLoader: order, bounded prefetch, exceptions in order, prompt stop, deadlines, and a
// pool of workers (order kept when batches finish out of order, PyTorch's num_workers=0 and
// prefetch_factor).
// Nothing here sleeps: the batch function blocks on futures that the test releases.

#include <tandem/error.hpp>
#include <tandem/loader.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

namespace tandem::data {
namespace {

using namespace std::chrono_literals;

TEST(Loader, BatchesArriveInOrderThenEnd) {
  BatchLoader<std::vector<int>> loader(
      7, [](std::size_t k) { return std::vector<int>(k + 1, static_cast<int>(k)); });
  for (std::size_t k = 0; k < 7; ++k) {
    EXPECT_EQ(loader.next_index(), k);
    auto b = loader.next();
    ASSERT_TRUE(b.has_value()) << "batch " << k;
    EXPECT_EQ(*b, std::vector<int>(k + 1, static_cast<int>(k)));
  }
  EXPECT_FALSE(loader.next().has_value());
  EXPECT_FALSE(loader.next().has_value());
}

TEST(Loader, EmptyAndResumedRanges) {
  BatchLoader<int> none(0, [](std::size_t) { return 1; });
  EXPECT_FALSE(none.next().has_value());

  LoaderOptions from5;
  from5.first = 5;
  BatchLoader<std::size_t> resumed(
      8, [](std::size_t k) { return k * 10; }, from5);
  EXPECT_EQ(resumed.next(), std::optional<std::size_t>(50));
  EXPECT_EQ(resumed.next(), std::optional<std::size_t>(60));
  EXPECT_EQ(resumed.next(), std::optional<std::size_t>(70));
  EXPECT_FALSE(resumed.next().has_value());

  LoaderOptions bad;
  bad.first = 9;
  EXPECT_THROW(BatchLoader<int>(
                   8, [](std::size_t) { return 0; }, bad),
               Error);
  LoaderOptions zero_depth;
  zero_depth.depth = 0;
  EXPECT_THROW(BatchLoader<int>(
                   8, [](std::size_t) { return 0; }, zero_depth),
               Error);
}

TEST(Loader, MoveOnlyBatches) {
  BatchLoader<std::unique_ptr<int>> loader(
      3, [](std::size_t k) { return std::make_unique<int>(static_cast<int>(k) * 2); });
  for (int k = 0; k < 3; ++k) {
    auto b = loader.next();
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(**b, k * 2);
  }
}

TEST(Loader, PrefetchIsBoundedByDepth) {
  for (std::size_t depth : {1u, 2u, 4u}) {
    std::atomic<std::size_t> consumed{0};
    std::atomic<std::size_t> violations{0};
    LoaderOptions o;
    o.depth = depth;
    BatchLoader<std::size_t> loader(
        50,
        [&](std::size_t k) {
          // Batch k is started only when fewer than `depth` finished batches wait; the
          // consumer counts a batch just after next() returns (hence one batch of slack).
          if (k > consumed.load() + depth) ++violations;
          return k;
        },
        o);
    for (std::size_t k = 0; k < 50; ++k) {
      auto b = loader.next();
      ASSERT_TRUE(b.has_value());
      EXPECT_EQ(*b, k);
      consumed.store(k + 1);
    }
    EXPECT_EQ(violations.load(), 0u) << "depth " << depth;
  }
}

TEST(Loader, ExceptionSurfacesInOrder) {
  BatchLoader<int> loader(10, [](std::size_t k) {
    if (k == 3) throw std::runtime_error("cannot decode batch 3");
    return static_cast<int>(k);
  });
  for (int k = 0; k < 3; ++k) EXPECT_EQ(loader.next(), std::optional<int>(k));
  try {
    loader.next();
    FAIL() << "the batch function's exception did not reach the consumer";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "cannot decode batch 3");
  }
  // It stays failed.
  EXPECT_THROW(loader.next(), std::runtime_error);

  BatchLoader<int> tandem_error(
      2, [](std::size_t) -> int { TANDEM_THROW(ErrorCode::Io, "disk gone"); });
  try {
    tandem_error.next();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Io);
  }
}

TEST(Loader, DestroyingStopsPromptlyWhenTheQueueIsFull) {
  std::atomic<std::size_t> made{0};
  {
    BatchLoader<int> loader(1'000'000'000, [&](std::size_t k) {
      ++made;
      return static_cast<int>(k);
    });
    EXPECT_EQ(loader.next(), std::optional<int>(0));
    EXPECT_EQ(loader.next(), std::optional<int>(1));
  }  // the producer waits on a full queue: the destructor wakes and joins it
  EXPECT_LE(made.load(), 2u + 2u + 1u);
}

TEST(Loader, StopReleasesABlockedConsumerAndJoinsAfterTheCurrentBatch) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> entered;
  std::atomic<bool> entered_once{false};
  auto loader = std::make_unique<BatchLoader<int>>(100, [&](std::size_t k) {
    if (k == 1) {
      if (!entered_once.exchange(true)) entered.set_value();
      // Blocks until the test releases it (bounded so that a bug cannot hang the test).
      EXPECT_EQ(released.wait_for(60s), std::future_status::ready);
    }
    return static_cast<int>(k);
  });
  EXPECT_EQ(loader->next(), std::optional<int>(0));
  ASSERT_EQ(entered.get_future().wait_for(60s), std::future_status::ready);
  // The consumer waits for batch 1 while the producer is stuck in it; stop() from another
  // thread releases the consumer with "no more batches", then joins once batch 1 returns.
  std::optional<int> got{-1};
  std::thread consumer([&] { got = loader->next(); });
  std::thread stopper([&] { loader->stop(); });
  consumer.join();
  EXPECT_FALSE(got.has_value());
  release.set_value();
  stopper.join();
  EXPECT_FALSE(loader->next().has_value());
  loader.reset();
}

TEST(Loader, ConsumerWaitHasADeadline) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  LoaderOptions o;
  o.timeout = 100ms;
  BatchLoader<int> loader(
      3,
      [&](std::size_t k) {
        if (k == 0) {
          EXPECT_EQ(released.wait_for(60s), std::future_status::ready);
        }
        return static_cast<int>(k);
      },
      o);
  try {
    loader.next();
    FAIL() << "next() did not time out";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Timeout);
    EXPECT_NE(e.message().find("batch 0"), std::string::npos) << e.what();
  }
  release.set_value();
  EXPECT_EQ(loader.next(), std::optional<int>(0)) << "the batch still arrives after a timeout";
}

// With several workers batch k+1 finishes before batch k (k even): each even batch waits until
// the next one is made. The consumer still gets 0, 1, 2, ...
TEST(LoaderWorkers, BatchesFinishingOutOfOrderArriveInOrder) {
  std::mutex m;
  std::condition_variable cv;
  std::set<std::size_t> made;
  LoaderOptions o;
  o.num_workers = 4;
  o.depth = 8;
  constexpr std::size_t kBatches = 41;
  BatchLoader<std::size_t> loader(
      kBatches,
      [&](std::size_t k) {
        std::unique_lock lock(m);
        if (k % 2 == 0 && k + 1 < kBatches) {
          EXPECT_TRUE(cv.wait_for(lock, 60s, [&] { return made.contains(k + 1); }))
              << "batch " << k + 1 << " never made while " << k << " waited";
        }
        made.insert(k);
        cv.notify_all();
        return k * 10;
      },
      o);
  for (std::size_t k = 0; k < kBatches; ++k) EXPECT_EQ(loader.next(), std::optional(k * 10));
  EXPECT_FALSE(loader.next().has_value());
}

TEST(LoaderWorkers, NoWorkersMakesEachBatchOnTheConsumersThread) {
  const auto consumer = std::this_thread::get_id();
  std::atomic<std::size_t> elsewhere{0};
  LoaderOptions o;
  o.num_workers = 0;
  BatchLoader<int> loader(
      5,
      [&](std::size_t k) {
        if (std::this_thread::get_id() != consumer) ++elsewhere;
        if (k == 3) throw std::runtime_error("batch 3");
        return static_cast<int>(k);
      },
      o);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(loader.next(), std::optional<int>(k));
  EXPECT_THROW(loader.next(), std::runtime_error);
  EXPECT_THROW(loader.next(), std::runtime_error);  // it stays failed
  EXPECT_EQ(elsewhere.load(), 0u);
}

TEST(LoaderWorkers, PrefetchFactorBoundsTheBatchesAheadAndAFailureStopsTheRest) {
  std::atomic<std::size_t> consumed{0};
  std::atomic<std::size_t> violations{0};
  std::atomic<std::size_t> after_failure{0};
  LoaderOptions o;
  o.num_workers = 3;
  o.prefetch_factor = 2;  // 6 ahead
  BatchLoader<std::size_t> loader(
      1000,
      [&](std::size_t k) {
        if (k > consumed.load() + 6) ++violations;
        if (k > 40) ++after_failure;
        if (k == 40) throw std::runtime_error("batch 40");
        return k;
      },
      o);
  for (std::size_t k = 0; k < 40; ++k) {
    EXPECT_EQ(loader.next(), std::optional(k));
    consumed.store(k + 1);
  }
  EXPECT_THROW(loader.next(), std::runtime_error);
  loader.stop();
  EXPECT_EQ(violations.load(), 0u);
  // Batches claimed before the failure was known may have run, within the prefetch bound.
  EXPECT_LE(after_failure.load(), 6u);
  LoaderOptions bad;
  bad.prefetch_factor = 0;
  EXPECT_THROW(BatchLoader<int>(
                   1, [](std::size_t) { return 0; }, bad),
               Error);
}

}  // namespace
}  // namespace tandem::data
