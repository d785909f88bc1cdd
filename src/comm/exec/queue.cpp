#include "comm/exec/queue.hpp"

#include "comm/exec/runner.hpp"
#include "core/futex.hpp"

#include <tandem/error.hpp>

#include <algorithm>
#include <system_error>
#include <thread>

namespace tandem::comm {

void Queue::attach(Runner& runner, std::chrono::microseconds lazy_start,
                   std::chrono::nanoseconds spin_time) noexcept {
  runner_ = &runner;
  lazy_start_ = lazy_start;
  spin_time_ = spin_time;
}

Admission Queue::admit_queued(Op& op, std::span<const std::size_t> counts, Start start,
                              Clock::duration timeout) {
  unbias();  // the worker will claim the mesh through the state word
  std::shared_ptr<OpWork> work;
  bool wake = true;
  {
    std::lock_guard guard(mutex_);
    work = enqueue(op, counts, timeout);
    if (start == Start::now_if_free) {
      wanted_ = true;  // this caller waits for the worker to run it
    } else {
      // Lazy start: a polling worker finds it by itself, unless a waiter runs it first. A
      // send or receive only the worker runs; an operation queued behind one that nobody
      // has started means nobody waits for them (the caller goes on submitting).
      const bool take_now =
          !lazy_now_ || is_p2p(op.call.kind) ||
          (queue_.size() > 1 && (state_.load(std::memory_order_relaxed) & kOwned) == 0);
      if (take_now) wanted_ = true;
      wake = lazy_start_.count() == 0 || worker_asleep_ || take_now;
    }
  }
  op.call.seq = work->op.call.seq;
  op.call.tag = work->op.call.tag;
  if (wake) worker_cv_.notify_one();
  return Admission(std::move(work));
}

std::shared_ptr<OpWork> Queue::enqueue(const Op& op, std::span<const std::size_t> counts,
                                       Clock::duration timeout) {
  TANDEM_CHECK(biased_to_.load(std::memory_order_relaxed) == nullptr,
               "an operation was queued while the mesh was biased to a thread");
  auto work = std::make_shared<OpWork>(op, counts, timeout, shared_from_this());
  start_worker();
  queue_.push_back(work);
  ++submitted_;
  // Nothing that can fail comes after the sequence number is taken (a gap would
  // desynchronise the ranks). kQueued is set first: from then on no inline call can claim
  // the mesh and a sequence number ahead of this one.
  state_.fetch_or(kQueued, std::memory_order_relaxed);
  assign_sequence(work->op, state_.fetch_add(sequence_step(op), std::memory_order_relaxed));
  if (!is_p2p(op.call.kind)) work->set_sequence(static_cast<std::int64_t>(work->op.call.seq));
  return work;
}

bool Queue::withdraw(const std::shared_ptr<OpWork>& work) {
  std::lock_guard guard(mutex_);
  const auto it = std::find(queue_.begin(), queue_.end(), work);
  if (it == queue_.end()) return false;
  queue_.erase(it);
  ++dequeued_;
  if (queue_.empty()) state_.fetch_and(~kQueued, std::memory_order_relaxed);
  return true;
}

void Queue::help(OpWork& work, Deadline deadline) {
  if (deadline < work.op.call.deadline) {
    // A shorter wait must return at its deadline while the operation goes on: the worker
    // runs it, now rather than at its next lazy poll.
    start_soon();
    return;
  }
  std::shared_ptr<OpWork> next;
  {
    std::lock_guard guard(mutex_);
    lazy_now_ = true;  // the caller waits right away: waking the worker at admit() is wasted
    if (stopping_ || queue_.empty()) return;
    // The mesh is free only when nothing runs: no inline call, no collective on the worker,
    // no send/recv in flight (the worker keeps it while any is).
    if ((state_.load(std::memory_order_relaxed) & kOwned) != 0) return;
    if (queue_.front().get() != &work || is_p2p(work.op.call.kind)) {
      // Operations ahead of it that nobody started (under lazy start the worker may be
      // between polls), or a send/recv, which only the worker runs: it takes them now, and
      // the next admits wake it too (this caller did not wait for those before).
      lazy_now_ = false;
      wanted_ = true;
    } else if (claim_mesh()) {
      next = pop_front();
    } else {
      return;
    }
  }
  if (!next) {
    worker_cv_.notify_one();
    return;
  }
  // close() waits for active_ to drop to 0 before the runner goes away.
  runner_->start(next, done_);
  complete();
  release_mesh();
}

void Queue::start_soon() {
  {
    std::lock_guard guard(mutex_);
    if (queue_.empty()) return;  // it started already
    lazy_now_ = false;           // nor will the next ones be waited for, most likely
    wanted_ = true;
  }
  worker_cv_.notify_one();
}

void Queue::bias_to_caller(int size) {
  if (size == 1 || !core::asymmetric_fences()) return;
  state_.fetch_or(kOwned, std::memory_order_relaxed);
  biased_to_.store(&detail::this_thread_token, std::memory_order_release);
}

void Queue::unbias() {
  if (biased_to_.load(std::memory_order_acquire) == nullptr) return;
  std::lock_guard guard(bias_mutex_);
  if (biased_to_.load(std::memory_order_relaxed) == nullptr) return;  // revoked meanwhile
  // A Dekker pair: the biased thread sets bias_busy_, then reads bias_revoked_, with a
  // compiler barrier between; this side sets bias_revoked_, then reads bias_busy_, with a
  // barrier on every running thread of the process between. One of the two sees the other.
  bias_revoked_.store(true, std::memory_order_relaxed);
  core::heavy_fence();
  // Its call in progress, if any, ends by its deadline. Revoking happens once per
  // communicator at most: yield, then sleep briefly while it runs.
  for (int i = 0; bias_busy_.load(std::memory_order_acquire); ++i) {
    if (i < 1000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  state_.fetch_and(~kOwned, std::memory_order_release);
  biased_to_.store(nullptr, std::memory_order_release);
}

bool Queue::claim_mesh() noexcept {
  std::uint64_t s = state_.load(std::memory_order_relaxed);
  while ((s & kOwned) == 0)
    if (state_.compare_exchange_weak(s, s | kOwned, std::memory_order_acquire,
                                     std::memory_order_relaxed))
      return true;
  return false;
}

void Queue::release_mesh() noexcept {
  if ((state_.fetch_and(~kOwned, std::memory_order_release) & kQueued) == 0) return;
  // Operations were queued meanwhile and the worker waits for the mesh. Taking the mutex
  // orders this with the worker's look at the state, so the notification is not lost.
  {
    std::lock_guard guard(mutex_);
    wanted_ = true;
  }
  worker_cv_.notify_one();
}

std::shared_ptr<OpWork> Queue::pop_front() {
  auto work = std::move(queue_.front());
  queue_.pop_front();
  ++dequeued_;
  if (queue_.empty()) {
    state_.fetch_and(~kQueued, std::memory_order_relaxed);
    wanted_ = false;
  }
  ++active_;
  return work;
}

void Queue::complete() {
  if (done_.empty()) return;
  {
    std::lock_guard guard(mutex_);
    active_ -= done_.size();
    if (active_ == 0 && stopping_) idle_cv_.notify_all();
  }
  // A callback may queue more (on_complete): it never claims the mesh this thread owns, so
  // done_ stays this thread's until it is cleared.
  for (auto& c : done_) {
    if (c.error) {
      c.work->mark_failed(std::move(c.error));
    } else {
      c.work->mark_done();
    }
  }
  done_.clear();
}

void Queue::start_worker() {
  if (worker_.joinable()) return;
  try {
    worker_ = std::thread([this] { worker_loop(); });
  } catch (const std::system_error& e) {
    TANDEM_THROW(ErrorCode::Io,
                 "could not start the communicator's worker thread for asynchronous operations "
                 "({}); the process may have hit its thread limit (ulimit -u)",
                 e.what());
  }
}

std::deque<std::shared_ptr<OpWork>> Queue::close(bool& running) {
  std::deque<std::shared_ptr<OpWork>> dropped;
  std::lock_guard guard(mutex_);
  stopping_ = true;
  dropped.swap(queue_);
  state_.fetch_and(~kQueued, std::memory_order_relaxed);
  running = active_ > 0;
  return dropped;
}

void Queue::join() noexcept {
  worker_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  // A waiting thread that runs an operation itself (help()) finishes it too.
  std::unique_lock lock(mutex_);
  idle_cv_.wait(lock, [&] { return active_ == 0; });
}

}  // namespace tandem::comm
