// The worker thread: runs queued operations in call order. A collective runs to completion.
// A send or recv is posted and left in flight while the worker moves on, so that a rank may
// post a recv and then a send (a ring exchange) without waiting for the recv first; the
// transport keeps every peer's messages in posting order, so the order of operations on the
// wire is still the call order. While only point-to-point operations are in flight and
// nothing is queued, the worker polls the mesh and sleeps on the queue, because a blocking
// wait on the mesh could not see a new operation arrive.

#include "comm/exec/queue.hpp"
#include "comm/exec/runner.hpp"
#include "core/futex.hpp"

#include <algorithm>
#include <chrono>

namespace tandem::comm {
namespace {

constexpr auto kMinPause = std::chrono::microseconds(20);
constexpr auto kMaxPause = std::chrono::microseconds(1000);
// Lazy start: each poll that finds nothing to take doubles the next one's wait, up to 256
// periods (0.2, 0.4, ..., 51.2 ms at 200 us); one that takes an operation resets it.
constexpr int kLazyBackoff = 256;

}  // namespace

void Queue::worker_loop() {
  std::unique_lock lock(mutex_);
  pause_ = kMinPause;
  period_ = lazy_start_;
  for (;;) {
    if (!runner_->in_flight()) {
      if (!wait_for_work(lock)) continue;
      if (stopping_) return;
    } else if (stopping_) {
      lock.unlock();
      runner_->fail_in_flight(ErrorCode::Aborted,
                              "the communicator was destroyed while it was in flight", done_);
      complete();
      give_up_mesh();
      return;
    } else if (queue_.empty() || held_back()) {
      progress_in_flight(lock);
      continue;
    }
    // This thread owns the mesh: take the next operation.
    auto work = pop_front();
    lazy_now_ = false;  // nobody waited for it: wake the worker for the next ones
    lock.unlock();
    runner_->start(work, done_);
    if (runner_->in_flight()) runner_->progress(done_);
    complete();
    lock.lock();
    pause_ = kMinPause;
    if (!runner_->in_flight()) give_up_mesh();
  }
}

bool Queue::wait_for_work(std::unique_lock<std::mutex>& lock) {
  if (lazy_polls(lock)) return true;
  // Under lazy start, an admit() that wakes this thread from its sleep starts a new round of
  // polls: the caller about to wait runs the operation itself.
  const bool lazy = lazy_start_.count() > 0;
  bool claimed = false;
  worker_asleep_ = true;
  worker_cv_.wait(lock, [&] {
    if (stopping_) return true;
    if (queue_.empty()) return false;
    if (lazy && lazy_now_ && !wanted_ && !p2p_first()) return true;
    claimed = claim_mesh();
    return claimed;
  });
  worker_asleep_ = false;
  period_ = lazy_start_;  // a burst after a quiet spell: poll briskly again
  return claimed || stopping_;
}

// Lazy start: poll while operations keep coming, then sleep until woken. A poll takes only
// an operation that was already at the front one period earlier: nobody came to run it. One
// queued a moment ago belongs to the caller about to wait for it; taking it would turn lazy
// start off and make every later call pay for waking this thread. A notification
// (release_mesh(): the mesh is free and operations wait) takes it at once, and so does a
// send or receive, which no waiting caller runs.
//
// Each poll that finds nothing to take doubles the period, up to kLazyBackoff periods, and
// the period stays long while callers keep waiting for what they submit (torch.distributed's
// blocking calls): on a host with as many ranks as cores, every poll preempts a rank in the
// middle of a collective and its peers wait for it (docs/python.md). A whole longest period
// without an admit() sends the worker to sleep until the next one.
bool Queue::lazy_polls(std::unique_lock<std::mutex>& lock) {
  bool found = false;
  std::uint64_t submitted = submitted_;
  while (lazy_start_.count() > 0 && lazy_now_ && !found) {
    const bool had_front = !queue_.empty();
    const std::uint64_t seen = dequeued_;
    if (!had_front) wanted_ = false;  // what it was wanted for ran meanwhile
    // Woken for good (wanted_: see admit(), release_mesh(), start_soon()) once the mesh is
    // free; a send or receive needs no wake-up.
    const bool notified = worker_cv_.wait_for(lock, period_, [&] {
      return stopping_.load(std::memory_order_relaxed) ||
             ((wanted_ || p2p_first()) && (state_.load(std::memory_order_relaxed) & kOwned) == 0);
    });
    found = stopping_ || ((notified || p2p_first() || (had_front && dequeued_ == seen)) &&
                          !queue_.empty() && claim_mesh());
    if (found) {
      period_ = lazy_start_;
    } else if (period_ >= kLazyBackoff * lazy_start_ && submitted_ == submitted) {
      break;
    } else {
      period_ = std::min(period_ * 2, kLazyBackoff * lazy_start_);
      submitted = submitted_;
    }
  }
  return found;
}

void Queue::progress_in_flight(std::unique_lock<std::mutex>& lock) {
  lock.unlock();
  bool completed = runner_->progress(done_);
  // Spin a little first, as the transport does: a reply often is microseconds away.
  const auto spin_until = Clock::now() + spin_time_;
  while (!completed && runner_->in_flight() && Clock::now() < spin_until) {
    if ((state_.load(std::memory_order_relaxed) & kQueued) != 0 ||
        stopping_.load(std::memory_order_relaxed))
      break;
    core::cpu_relax();
    completed = runner_->progress(done_);
  }
  complete();
  lock.lock();
  if (!runner_->in_flight()) {
    give_up_mesh();
    pause_ = kMinPause;
  } else if (completed) {
    pause_ = kMinPause;
  } else if ((queue_.empty() || held_back()) && !stopping_) {
    worker_cv_.wait_for(lock, pause_);
    pause_ = std::min(pause_ * 2, kMaxPause);
  }
}

bool Queue::held_back() const {
  return !queue_.empty() && queue_.front()->op.call.kind != CollectiveKind::send &&
         runner_->any_source_unmatched();
}

bool Queue::p2p_first() const {
  return !queue_.empty() && is_p2p(queue_.front()->op.call.kind);
}

}  // namespace tandem::comm
