#pragma once
/// @file loader.hpp
/// BatchLoader: prepares batches on background worker threads while the caller trains.
///
///   tandem::data::BatchLoader<MyBatch> loader(num_batches, [&](std::size_t k) {
///     return make_batch(k);  // runs on the loader's thread, batches in order 0, 1, 2, ...
///   });
///   while (auto batch = loader.next()) train_step(*batch);
///
/// `num_workers` threads (PyTorch's DataLoader semantics: 0 makes each batch on the consumer's
/// thread, in next()) make batches concurrently, at most `depth` (or `prefetch_factor` per
/// worker) ahead of the consumer, which still gets them in index order: a batch is a function
/// of its index alone (draw any randomness from the index and a seed), so the batches are the
/// same for any number of workers. An exception thrown by the batch function reaches the
/// consumer in order: next() returns the batches before it, then rethrows it. Destroying (or
/// stop()-ing) the loader joins the workers as soon as the batches being made are finished; a
/// blocked consumer is released.

#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

namespace tandem::data {

struct LoaderOptions {
  /// Batches made or being made ahead of the consumer (at least 1; raised to num_workers).
  std::size_t depth = 2;
  /// Worker threads; 0: batches are made on the consumer's thread, in next().
  std::size_t num_workers = 1;
  /// PyTorch's prefetch_factor: when set, depth is this many batches per worker.
  std::optional<std::size_t> prefetch_factor;
  /// Index of the first batch to make (to resume an epoch part-way).
  std::size_t first = 0;
  /// How long next() waits for one batch before it throws Error(Timeout);
  /// default TANDEM_TIMEOUT.
  std::optional<std::chrono::milliseconds> timeout;
};

namespace detail {

/// The type-erased machinery behind BatchLoader: workers, the batches in index order, errors,
/// stop.
class PrefetchEngine {
 public:
  struct Slot {
    virtual ~Slot() = default;
  };
  using Produce = std::function<std::unique_ptr<Slot>(std::size_t index)>;

  PrefetchEngine(std::size_t num_batches, Produce produce, const LoaderOptions& options);
  ~PrefetchEngine();
  PrefetchEngine(const PrefetchEngine&) = delete;
  PrefetchEngine& operator=(const PrefetchEngine&) = delete;

  /// The next batch in order; nullptr after the last one or after stop(). Rethrows the batch
  /// function's exception; throws Error(Timeout) when no batch arrives within the timeout.
  std::unique_ptr<Slot> next();
  void stop() noexcept;
  /// Index of the batch next() returns next.
  std::size_t next_index() const noexcept;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace detail

/// Prefetching loader of `num_batches` batches made by `make(k)` for k = first .. num_batches-1.
/// `Batch` must be movable. next() is meant for one consumer thread.
template <class Batch>
class BatchLoader {
 public:
  using MakeBatch = std::function<Batch(std::size_t index)>;

  BatchLoader(std::size_t num_batches, MakeBatch make, LoaderOptions options = {})
      : engine_(num_batches, wrap(std::move(make)), options) {}

  /// The next batch, or nullopt when every batch was returned (or after stop()).
  std::optional<Batch> next() {
    auto slot = engine_.next();
    if (!slot) return std::nullopt;
    return std::optional<Batch>(std::move(static_cast<Holder&>(*slot).value));
  }
  /// Stops the background thread (after the batch it is making) and drops prepared batches.
  void stop() noexcept { engine_.stop(); }
  /// Index of the batch next() returns next.
  std::size_t next_index() const noexcept { return engine_.next_index(); }

 private:
  struct Holder final : detail::PrefetchEngine::Slot {
    explicit Holder(Batch&& b) : value(std::move(b)) {}
    Batch value;
  };
  static detail::PrefetchEngine::Produce wrap(MakeBatch make) {
    return
        [make = std::move(make)](std::size_t k) -> std::unique_ptr<detail::PrefetchEngine::Slot> {
          return std::make_unique<Holder>(make(k));
        };
  }
  detail::PrefetchEngine engine_;
};

}  // namespace tandem::data
