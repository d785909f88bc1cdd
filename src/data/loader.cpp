// The workers behind BatchLoader: they claim batch indices in order, at most `depth` ahead of
// the consumer, and file each finished batch under its index; the consumer takes them in index
// order. Every wait ends on a condition that the other side, stop() or the deadline sets.

#include <tandem/error.hpp>
#include <tandem/loader.hpp>
#include <tandem/log.hpp>
#include <tandem/settings.hpp>
#include <tandem/types.hpp>

#include <algorithm>
#include <condition_variable>
#include <limits>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace tandem::data::detail {

struct PrefetchEngine::State {
  static constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();

  std::size_t end = 0;
  std::size_t depth = 2;
  Clock::duration timeout{};
  Produce produce;

  std::mutex mutex;
  std::condition_variable produced;  // consumer waits: its batch, a failure or stop
  std::condition_variable consumed;  // workers wait: room ahead of the consumer, or stop
  std::map<std::size_t, std::unique_ptr<Slot>> ready;  // finished batches by index
  std::size_t claim = 0;                               // the index the next worker makes
  std::size_t next = 0;                                // the index the consumer gets next
  bool stopped = false;
  std::exception_ptr error;          // the batch function's exception ...
  std::size_t error_index = kNone;   // ... at this index: the consumer gets it there
  std::vector<std::thread> workers;  // last: started after everything above exists

  // A worker: claims the next index while it lies within `depth` of the consumer.
  void work() {
    std::unique_lock lock(mutex);
    for (;;) {
      consumed.wait(lock, [&] { return stopped || claim >= limit() || claim < next + depth; });
      if (stopped || claim >= limit()) return;
      const std::size_t k = claim++;
      lock.unlock();
      std::unique_ptr<Slot> slot;
      std::exception_ptr failure;
      try {
        slot = produce(k);
      } catch (...) {
        failure = std::current_exception();
      }
      lock.lock();
      if (stopped) return;
      if (failure) {
        if (k < error_index) {
          error = failure;
          error_index = k;
        }
      } else {
        ready.emplace(k, std::move(slot));
      }
      produced.notify_all();
    }
  }
  // No batch at or after a failed one is made.
  std::size_t limit() const noexcept { return std::min(end, error_index); }
};

PrefetchEngine::PrefetchEngine(std::size_t num_batches, Produce produce,
                               const LoaderOptions& options)
    : state_(std::make_unique<State>()) {
  TANDEM_CHECK_ARG(options.depth >= 1, "BatchLoader: depth must be at least 1, got {}",
                   options.depth);
  TANDEM_CHECK_ARG(!options.prefetch_factor || *options.prefetch_factor >= 1,
                   "BatchLoader: prefetch_factor must be at least 1, got {}",
                   options.prefetch_factor.value_or(0));
  TANDEM_CHECK_ARG(options.num_workers <= 1024, "BatchLoader: {} workers is too many",
                   options.num_workers);
  TANDEM_CHECK_ARG(options.first <= num_batches,
                   "BatchLoader: first batch {} is beyond the {} batches", options.first,
                   num_batches);
  TANDEM_CHECK_ARG(static_cast<bool>(produce), "BatchLoader: no batch function");
  State& s = *state_;
  s.end = num_batches;
  const std::size_t workers = options.num_workers;
  s.depth = options.prefetch_factor ? *options.prefetch_factor * std::max<std::size_t>(1, workers)
                                    : options.depth;
  s.depth = std::max(s.depth, workers);  // an idle worker prefetches nothing
  s.timeout =
      options.timeout
          ? Clock::duration(*options.timeout)
          : std::chrono::duration_cast<Clock::duration>(settings::get_seconds("TANDEM_TIMEOUT"));
  s.produce = std::move(produce);
  s.next = s.claim = options.first;
  s.workers.reserve(workers);
  for (std::size_t i = 0; i < workers; ++i) s.workers.emplace_back([&s] { s.work(); });
}

PrefetchEngine::~PrefetchEngine() {
  stop();
}

void PrefetchEngine::stop() noexcept {
  {
    std::lock_guard lock(state_->mutex);
    state_->stopped = true;
    state_->ready.clear();
  }
  state_->consumed.notify_all();
  state_->produced.notify_all();
  for (std::thread& t : state_->workers)
    if (t.joinable() && t.get_id() != std::this_thread::get_id()) t.join();
}

std::size_t PrefetchEngine::next_index() const noexcept {
  std::lock_guard lock(state_->mutex);
  return state_->next;
}

std::unique_ptr<PrefetchEngine::Slot> PrefetchEngine::next() {
  State& s = *state_;
  std::unique_lock lock(s.mutex);
  if (s.stopped || s.next >= s.end) return nullptr;
  if (s.workers.empty() && s.next < s.error_index) {
    // No workers: the consumer makes its batch itself (PyTorch's num_workers=0).
    const std::size_t k = s.next;
    lock.unlock();
    try {
      auto slot = s.produce(k);
      lock.lock();
      ++s.next;
      return slot;
    } catch (...) {
      lock.lock();
      s.error = std::current_exception();
      s.error_index = k;
    }
  }
  const Deadline deadline = deadline_in(s.timeout);
  const bool ready = s.produced.wait_until(lock, deadline, [&] {
    return s.stopped || s.ready.contains(s.next) || s.error_index == s.next;
  });
  if (!ready)
    TANDEM_THROW(ErrorCode::Timeout,
                 "BatchLoader: batch {} not ready after {:.1f} s: the batch function has not "
                 "returned (stuck reading data?); raise TANDEM_TIMEOUT or LoaderOptions::timeout "
                 "if batches are this slow",
                 s.next, std::chrono::duration<double>(s.timeout).count());
  if (s.stopped) return nullptr;
  if (const auto it = s.ready.find(s.next); it != s.ready.end()) {
    auto slot = std::move(it->second);
    s.ready.erase(it);
    ++s.next;
    lock.unlock();
    s.consumed.notify_all();
    return slot;
  }
  TANDEM_DETAIL(data, "BatchLoader: batch {} failed; rethrowing in the consumer", s.error_index);
  std::rethrow_exception(s.error);
}

}  // namespace tandem::data::detail
