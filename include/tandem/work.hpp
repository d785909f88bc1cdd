#pragma once
/// @file work.hpp
/// Work: the handle of an asynchronous collective.

#include <tandem/error.hpp>
#include <tandem/types.hpp>

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace tandem {

/// Completion handle of one asynchronous operation. Thread-safe.
class Work {
 public:
  Work() = default;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;
  virtual ~Work() = default;

  /// Blocks until the operation completed or failed, or `deadline` passed. When the
  /// operation has not started, nothing runs ahead of it and `deadline` is no earlier than
  /// the operation's own, it runs on the calling thread (no wake-up of the worker thread to
  /// wait for).
  /// Rethrows the operation's Error if it failed; throws Error(Timeout) at the deadline
  /// (the operation itself keeps running and keeps its own deadline).
  void wait(Deadline deadline);
  /// wait() with the communicator's timeout (TANDEM_TIMEOUT).
  void wait();
  /// True once the operation completed or failed (never blocks).
  bool test() const noexcept { return state_.load(std::memory_order_acquire) != State::pending; }
  /// Same as test().
  bool is_completed() const noexcept { return test(); }
  /// For a caller that will not wait() for the operation (it chains a future to it, or
  /// polls test()): under lazy start (CommOptions::lazy_start) the communicator's worker
  /// starts it now instead of at its next poll. Otherwise, and once it started, a no-op.
  void start() {
    if (!test()) start_now();
  }
  /// The failure, or nullptr while pending or after success.
  std::exception_ptr error() const;
  /// Runs `fn` once the operation has completed or failed: on the thread that completes it,
  /// after waiters were woken, or at once on this thread when it already has. Callbacks run
  /// in the order they were added. `fn` must be quick and must not wait for later operations
  /// of the same communicator (it may run on the communicator's worker thread); it must not
  /// throw. This is how bindings chain completion (copy-back, futures) without a thread of
  /// their own per operation.
  void on_complete(std::function<void()> fn);
  /// When the operation completed, where the communicator records a timeline
  /// (TANDEM_TRACE); Clock::time_point{} otherwise, and while it is pending.
  Clock::time_point completed_at() const noexcept {
    return test() ? completed_at_ : Clock::time_point{};
  }
  /// The collective's sequence number on its communicator, as error messages show it
  /// ("allreduce #12"); -1 for sends, receives and operations not run by a communicator.
  std::int64_t sequence() const noexcept { return sequence_; }

  /// A receive's sender, once it completed: the rank it named, or for a receive from
  /// kAnySource the rank whose message it took. -1 for other operations and while pending.
  int source() const noexcept { return test() ? source_ : -1; }

  /// Called by the runtime exactly once.
  void mark_done();
  void mark_failed(std::exception_ptr error);

 protected:
  /// What the operation is, for the Timeout message of wait() ("allreduce #3 (f32 x 8, ring)").
  virtual std::string describe() const;
  /// Called by wait() before it blocks: may run the operation on the waiting thread, when
  /// it would end by `deadline` either way.
  virtual void run_if_next(Deadline /*deadline*/) {}
  /// Called by start() while the operation is pending.
  virtual void start_now() {}

  enum class State : std::uint8_t { pending, done, failed };
  std::atomic<State> state_{State::pending};
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::exception_ptr error_;
  Clock::time_point completed_at_{};  ///< set before mark_done()/mark_failed(), if at all
  std::int64_t sequence_ = -1;
  int source_ = -1;  ///< set before mark_done(), for receives
  std::vector<std::function<void()>> callbacks_;
  Clock::duration default_timeout_ = std::chrono::minutes(10);
  friend class Communicator;
};

}  // namespace tandem
