#include "python/work.hpp"

#include <tandem/error.hpp>

#include <ATen/core/ivalue.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace tandem::python {
namespace {

// One thread per process that completes futures (and so runs their callbacks). Never
// destroyed: at interpreter exit it may sit in a wait, and a static destructor joining it
// could block the exit. stop() (at interpreter exit, before finalization) ends it: a callback
// run after the interpreter began to finalize would take the GIL, and Python ends a thread
// that does by unwinding it, which the C++ frames below it turn into std::terminate.
class Completer {
 public:
  static Completer& get() {
    static Completer* completer = new Completer();
    return *completer;
  }
  void post(std::function<void()> fn) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;  // the interpreter is exiting: nobody waits for the future
      queue_.push_back(std::move(fn));
    }
    cv_.notify_all();
  }
  // Drops what is queued, lets the function running now finish (it may need the GIL, which
  // the caller must not hold), and ends the thread; returns false if that function did not
  // finish within `patience`.
  bool stop(std::chrono::milliseconds patience) {
    std::deque<std::function<void()>> dropped;
    std::unique_lock lock(mutex_);
    stopping_ = true;
    dropped.swap(queue_);
    cv_.notify_all();
    const bool exited = cv_.wait_for(lock, patience, [&] { return exited_; });
    lock.unlock();
    // What the dropped functions hold (a communicator that abort() released) goes without the
    // lock: its destructor completes works, which post() here.
    dropped.clear();
    return exited;
  }

 private:
  Completer() {
    std::thread([this] {
      std::unique_lock lock(mutex_);
      for (;;) {
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (stopping_) break;
        std::function<void()> fn = std::move(queue_.front());
        queue_.pop_front();
        lock.unlock();
        fn();
        fn = nullptr;  // what it holds goes before the lock is taken again
        lock.lock();
      }
      exited_ = true;
      cv_.notify_all();
    }).detach();
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  bool exited_ = false;
};

}  // namespace

bool stop_completing_futures(std::chrono::milliseconds patience) {
  return Completer::get().stop(patience);
}

void run_later(std::function<void()> fn) {
  Completer::get().post(std::move(fn));
}

TandemWork::TandemWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
                       std::chrono::milliseconds timeout)
    : c10d::Work(rank, type), outputs_(std::move(outputs)), timeout_(timeout) {
  for (const auto& t : outputs_) {
    if (t.defined() && t.is_cuda()) {
      // torch's device-neutral interface: this file builds against CPU torch too.
      stream_ = c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStream(t.device());
      break;
    }
  }
}

void TandemWork::synchronize() {
  if (!stream_) return;
  const c10::impl::VirtualGuardImpl cuda(c10::DeviceType::CUDA);
  const c10::Stream current = cuda.getStream(stream_->device());
  if (current == *stream_) return;  // ordered there already
  c10::Event done(c10::DeviceType::CUDA);
  done.record(*stream_);
  done.block(current);
}

void TandemWork::track(std::vector<std::shared_ptr<tandem::Work>> parts,
                       std::function<void()> on_success, std::vector<at::Tensor> keep) {
  parts_ = std::move(parts);
  on_success_ = std::move(on_success);
  if (on_success_) caller_state_.emplace();
  keep_ = std::move(keep);
  if (parts_.empty()) {
    complete_now();
    return;
  }
  remaining_.store(static_cast<int>(parts_.size()), std::memory_order_release);
  // Each callback keeps this work (and so the tensors) alive until the part completed.
  for (const auto& part : parts_) {
    auto self = c10::intrusive_ptr<TandemWork>::unsafe_reclaim_from_nonowning(this);
    part->on_complete([self, part] { self->part_completed(part); });
  }
}

int TandemWork::sourceRank() const {
  return retrieveOpType() == c10d::OpType::RECV && parts_.size() == 1 ? parts_[0]->source() : -1;
}

void TandemWork::complete_now() {
  remaining_.store(1, std::memory_order_release);
  one_completed(nullptr);
}

void TandemWork::track_works(const std::vector<c10::intrusive_ptr<TandemWork>>& works) {
  if (works.empty()) {
    complete_now();
    return;
  }
  // wait() and isCompleted() drive the operations of every work of the block.
  for (const auto& w : works) parts_.insert(parts_.end(), w->parts_.begin(), w->parts_.end());
  remaining_.store(static_cast<int>(works.size()), std::memory_order_release);
  for (const auto& w : works) {
    auto self = c10::intrusive_ptr<TandemWork>::unsafe_reclaim_from_nonowning(this);
    w->when_done([self, w] { self->one_completed(w->exception()); });
  }
}

void TandemWork::when_done(std::function<void()> fn) {
  {
    std::lock_guard lock(mutex_);
    if (!completed_) {
      listeners_.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

void TandemWork::part_completed(const std::shared_ptr<tandem::Work>& part) {
  one_completed(part ? part->error() : nullptr);
}

void TandemWork::one_completed(std::exception_ptr e) {
  if (e) {
    std::lock_guard lock(mutex_);
    if (!first_error_) first_error_ = e;
  }
  if (remaining_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  std::exception_ptr error;
  {
    std::lock_guard lock(mutex_);
    error = first_error_;
  }
  if (!error && on_success_) {
    try {
      // The copy-back of a CUDA call runs on its stream, after the collective.
      std::optional<c10::StreamGuard> on_stream;
      if (stream_) on_stream.emplace(*stream_);
      std::optional<at::ThreadLocalStateGuard> as_caller;
      if (caller_state_) as_caller.emplace(*caller_state_);
      on_success_();
    } catch (...) {
      error = std::current_exception();
    }
  }
  on_success_ = nullptr;
  caller_state_.reset();
  keep_.clear();
  finish(error);
  bool requested;
  std::vector<std::function<void()>> listeners;
  {
    std::lock_guard lock(mutex_);
    requested = future_requested_;
    listeners.swap(listeners_);
  }
  for (auto& fn : listeners) fn();
  if (requested) {
    auto self = c10::intrusive_ptr<TandemWork>::unsafe_reclaim_from_nonowning(this);
    Completer::get().post([self] { self->complete_future(); });
  }
}

bool TandemWork::isCompleted() {
  {
    std::lock_guard lock(mutex_);
    if (completed_) return true;
  }
  // Polled, not waited for: its operations must not wait for the worker's next lazy poll.
  for (const auto& part : parts_) part->start();
  return false;
}

bool TandemWork::isSuccess() const {
  std::lock_guard lock(mutex_);
  return completed_ && !exception_;
}

std::exception_ptr TandemWork::exception() const {
  std::lock_guard lock(mutex_);
  return exception_;
}

bool TandemWork::wait(std::chrono::milliseconds timeout) {
  const Deadline deadline = deadline_in(timeout.count() > 0 ? timeout : timeout_);
  // tandem's own waits: they rethrow a part's error, or say which operation missed the
  // deadline.
  for (const auto& part : parts_) part->wait(deadline);
  std::unique_lock lock(mutex_);
  if (!cv_.wait_until(lock, deadline, [&] { return completed_; })) {
    TANDEM_THROW(ErrorCode::Timeout,
                 "a collective of backend 'tandem' completed but its results were not copied "
                 "back by the deadline of wait()");
  }
  if (exception_) std::rethrow_exception(exception_);
  synchronize();
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> TandemWork::getFuture() {
  bool done;
  {
    std::lock_guard lock(mutex_);
    if (!future_) {
      // A CUDA call's future carries its device: torch records its events on the stream
      // current at markCompleted() (the call's, below) and makes the callbacks' streams wait.
      std::vector<c10::Device> devices;
      if (stream_) devices.push_back(stream_->device());
      future_ = c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()), std::move(devices));
    }
    future_requested_ = true;
    done = completed_;
  }
  if (done) {
    complete_future();
  } else {
    // DDP's buckets: waited for through the future, never through wait(), so no waiting
    // thread runs them; the worker takes them now rather than at its next lazy poll.
    for (const auto& part : parts_) part->start();
  }
  return future_;
}

void TandemWork::complete_future() {
  if (future_completed_.exchange(true)) return;
  std::exception_ptr error;
  {
    std::lock_guard lock(mutex_);
    error = exception_;
  }
  if (error) {
    future_->setError(error);
  } else {
    std::optional<c10::StreamGuard> on_stream;
    if (stream_) on_stream.emplace(*stream_);
    future_->markCompleted(c10::IValue(outputs_));
  }
}

#if TANDEM_HAVE_FUTURE_RESULT
c10::intrusive_ptr<c10::ivalue::Future> TandemWork::getFutureResult() {
  auto result = c10::make_intrusive<c10::ivalue::Future>(c10::IntType::get());
  getFuture()->addCallback([result](c10::ivalue::Future& f) {
    auto r = c10d::WorkResult::SUCCESS;
    if (f.hasError()) {
      r = c10d::WorkResult::COMM_ERROR;
      try {
        std::rethrow_exception(f.exception_ptr());
      } catch (const Error& e) {
        if (e.code() == ErrorCode::Timeout) r = c10d::WorkResult::TIMEOUT;
      } catch (...) {
      }
    }
    result->markCompleted(c10::IValue(static_cast<std::int64_t>(r)));
  });
  return result;
}
#endif

std::vector<at::Tensor> TandemWork::result() {
  return outputs_;
}

}  // namespace tandem::python
