// The prefetch thread behind BatchLoader: a bounded queue between one producer thread and one
// consumer. Every wait ends on a condition that the other side, stop() or the deadline sets.

#include <tandem/error.hpp>
#include <tandem/loader.hpp>
#include <tandem/log.hpp>
#include <tandem/settings.hpp>
#include <tandem/types.hpp>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace tandem::data::detail {

struct PrefetchEngine::State {
  std::size_t end = 0;
  std::size_t depth = 2;
  Clock::duration timeout{};
  Produce produce;

  std::mutex mutex;
  std::condition_variable produced;  // consumer waits: a batch, the end, a failure or stop
  std::condition_variable consumed;  // producer waits: room in the queue or stop
  std::deque<std::unique_ptr<Slot>> queue;
  std::size_t next = 0;   // index of the batch the consumer gets next
  bool finished = false;  // the producer made its last batch (or failed)
  bool stopped = false;
  std::exception_ptr error;  // the batch function's exception, after the queued batches
  std::size_t error_index = 0;
  std::thread thread;  // last: started after everything above exists

  void run(std::size_t first) {
    for (std::size_t k = first; k < end; ++k) {
      {
        std::unique_lock lock(mutex);
        consumed.wait(lock, [&] { return stopped || queue.size() < depth; });
        if (stopped) return;
      }
      std::unique_ptr<Slot> slot;
      try {
        slot = produce(k);
      } catch (...) {
        std::lock_guard lock(mutex);
        error = std::current_exception();
        error_index = k;
        finished = true;
        produced.notify_all();
        return;
      }
      std::lock_guard lock(mutex);
      if (stopped) return;
      queue.push_back(std::move(slot));
      produced.notify_all();
    }
    std::lock_guard lock(mutex);
    finished = true;
    produced.notify_all();
  }
};

PrefetchEngine::PrefetchEngine(std::size_t num_batches, Produce produce,
                               const LoaderOptions& options)
    : state_(std::make_unique<State>()) {
  TANDEM_CHECK_ARG(options.depth >= 1, "BatchLoader: depth must be at least 1, got {}",
                   options.depth);
  TANDEM_CHECK_ARG(options.first <= num_batches,
                   "BatchLoader: first batch {} is beyond the {} batches", options.first,
                   num_batches);
  TANDEM_CHECK_ARG(static_cast<bool>(produce), "BatchLoader: no batch function");
  state_->end = num_batches;
  state_->depth = options.depth;
  state_->timeout =
      options.timeout
          ? Clock::duration(*options.timeout)
          : std::chrono::duration_cast<Clock::duration>(settings::get_seconds("TANDEM_TIMEOUT"));
  state_->produce = std::move(produce);
  state_->next = options.first;
  const std::size_t first = options.first;
  State* s = state_.get();
  state_->thread = std::thread([s, first] { s->run(first); });
}

PrefetchEngine::~PrefetchEngine() {
  stop();
}

void PrefetchEngine::stop() noexcept {
  {
    std::lock_guard lock(state_->mutex);
    state_->stopped = true;
    state_->queue.clear();
  }
  state_->consumed.notify_all();
  state_->produced.notify_all();
  if (state_->thread.joinable() && state_->thread.get_id() != std::this_thread::get_id())
    state_->thread.join();
}

std::size_t PrefetchEngine::next_index() const noexcept {
  std::lock_guard lock(state_->mutex);
  return state_->next;
}

std::unique_ptr<PrefetchEngine::Slot> PrefetchEngine::next() {
  State& s = *state_;
  std::unique_lock lock(s.mutex);
  if (s.stopped || s.next >= s.end) return nullptr;
  const Deadline deadline = deadline_in(s.timeout);
  const bool ready = s.produced.wait_until(
      lock, deadline, [&] { return s.stopped || !s.queue.empty() || s.finished; });
  if (!ready)
    TANDEM_THROW(ErrorCode::Timeout,
                 "BatchLoader: batch {} not ready after {:.1f} s: the batch function has not "
                 "returned (stuck reading data?); raise TANDEM_TIMEOUT or LoaderOptions::timeout "
                 "if batches are this slow",
                 s.next, std::chrono::duration<double>(s.timeout).count());
  if (s.stopped) return nullptr;
  if (!s.queue.empty()) {
    auto slot = std::move(s.queue.front());
    s.queue.pop_front();
    ++s.next;
    lock.unlock();
    s.consumed.notify_all();
    return slot;
  }
  if (s.error) {
    TANDEM_DETAIL(data, "BatchLoader: batch {} failed; rethrowing in the consumer", s.error_index);
    std::rethrow_exception(s.error);
  }
  return nullptr;  // finished: every batch was returned
}

}  // namespace tandem::data::detail
