#pragma once
/// @file work.hpp
/// Work: the handle of an asynchronous collective.

#include <tandem/error.hpp>
#include <tandem/types.hpp>

#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>

namespace tandem {

/// Completion handle of one asynchronous operation. Thread-safe.
class Work {
 public:
  Work() = default;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;
  virtual ~Work() = default;

  /// Blocks until the operation completed or failed, or `deadline` passed.
  /// Rethrows the operation's Error if it failed; throws Error(Timeout) at the deadline
  /// (the operation itself keeps running and keeps its own deadline).
  void wait(Deadline deadline);
  /// wait() with the communicator's timeout (TANDEM_TIMEOUT).
  void wait();
  /// True once the operation completed or failed (never blocks).
  bool test() const noexcept { return state_.load(std::memory_order_acquire) != State::pending; }
  /// Same as test().
  bool is_completed() const noexcept { return test(); }
  /// The failure, or nullptr while pending or after success.
  std::exception_ptr error() const;

  /// Called by the runtime exactly once.
  void mark_done();
  void mark_failed(std::exception_ptr error);

 protected:
  /// What the operation is, for the Timeout message of wait() ("allreduce #3 (f32 x 8, ring)").
  virtual std::string describe() const;

  enum class State : std::uint8_t { pending, done, failed };
  std::atomic<State> state_{State::pending};
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::exception_ptr error_;
  Clock::duration default_timeout_ = std::chrono::minutes(10);
  friend class Communicator;
};

}  // namespace tandem
