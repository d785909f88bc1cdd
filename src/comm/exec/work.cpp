#include "comm/exec/op.hpp"
#include "comm/exec/queue.hpp"

#include <tandem/error.hpp>
#include <tandem/work.hpp>

#include <chrono>

namespace tandem {

void Work::wait(Deadline deadline) {
  if (state_.load(std::memory_order_acquire) == State::pending) run_if_next(deadline);
  if (state_.load(std::memory_order_acquire) == State::pending) {
    std::unique_lock lock(mutex_);
    const auto finished = [&] { return state_.load(std::memory_order_acquire) != State::pending; };
    if (deadline == Deadline::max()) {
      cv_.wait(lock, finished);
    } else if (!cv_.wait_until(lock, deadline, finished)) {
      TANDEM_THROW(ErrorCode::Timeout,
                   "{} did not complete by the deadline given to Work::wait(); it keeps running "
                   "until its own deadline: wait again, or abort() the communicator",
                   describe());
    }
  }
  if (state_.load(std::memory_order_acquire) == State::failed) {
    std::exception_ptr e;
    {
      std::lock_guard lock(mutex_);
      e = error_;
    }
    // The caller handles a copy of its own: the original is shared with the thread that
    // failed the operation, which may release it last, after the caller's handler read it
    // (ThreadSanitizer cannot see the ordering inside the C++ runtime's reference count).
    try {
      std::rethrow_exception(e);
    } catch (const Error& error) {
      throw Error(error);
    }
  }
}

void Work::wait() {
  wait(deadline_in(default_timeout_));
}

std::exception_ptr Work::error() const {
  std::lock_guard lock(mutex_);
  return error_;
}

void Work::on_complete(std::function<void()> fn) {
  {
    std::lock_guard lock(mutex_);
    if (state_.load(std::memory_order_relaxed) == State::pending) {
      callbacks_.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

void Work::mark_done() {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard lock(mutex_);
    if (state_.load(std::memory_order_relaxed) != State::pending) return;
    state_.store(State::done, std::memory_order_release);
    callbacks.swap(callbacks_);
  }
  cv_.notify_all();
  for (auto& fn : callbacks) fn();
}

void Work::mark_failed(std::exception_ptr error) {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard lock(mutex_);
    if (state_.load(std::memory_order_relaxed) != State::pending) return;
    error_ = error ? std::move(error)
                   : std::make_exception_ptr(Error(ErrorCode::Internal, "operation failed"));
    state_.store(State::failed, std::memory_order_release);
    callbacks.swap(callbacks_);
  }
  cv_.notify_all();
  for (auto& fn : callbacks) fn();
}

std::string Work::describe() const {
  return "the operation";
}

namespace comm {

OpWork::OpWork(const Op& o, std::span<const std::size_t> c, Clock::duration timeout,
               std::shared_ptr<Queue> queue)
    : op(o), counts(c.begin(), c.end()), queue_(std::move(queue)) {
  op.call.counts = counts;
  default_timeout_ = timeout;
}

bool OpWork::finished_by(Deadline deadline) {
  std::unique_lock lock(mutex_);
  const auto finished = [&] { return state_.load(std::memory_order_acquire) != State::pending; };
  if (deadline == Deadline::max()) {
    cv_.wait(lock, finished);
    return true;
  }
  return cv_.wait_until(lock, deadline, finished);
}

std::string OpWork::describe() const {
  return comm::describe(op);
}

void OpWork::run_if_next(Deadline deadline) {
  queue_->help(*this, deadline);
}

void OpWork::start_now() {
  queue_->start_soon();
}

}  // namespace comm
}  // namespace tandem
