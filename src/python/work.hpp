#pragma once
// The c10d Work of a tandem collective: it completes when every tandem Work behind it has
// (an uneven all_to_all is several sends and receives), after staged results were copied
// back into the user's tensors. Its future, which DDP's reducer and communication hooks
// chain on, is completed on a thread of its own, so that a hook that waits for a second
// collective inside a callback (PowerSGD does) cannot block tandem's worker thread.
//
// On CUDA tensors the work belongs to the stream that was current when the call was made:
// the collective is ordered on it (the device backend may complete the tandem Work before
// the GPU finished), the copy-back runs on it, the future carries the device and records
// its events there, and wait() makes the current stream wait for it.

#include "python/torch_compat.hpp"

#include <tandem/work.hpp>

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <ATen/ThreadLocalState.h>
#include <atomic>
#include <c10/core/Stream.h>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tandem::python {

/// Ends the thread that completes the works' futures, at interpreter exit (tandem.torch's
/// atexit handler, without the GIL): queued completions are dropped and a callback running
/// now may finish. Returns false when it did not finish within `patience`.
bool stop_completing_futures(std::chrono::milliseconds patience);

/// Runs `fn` on the thread that completes the futures, after what is queued there: work that
/// must not hold up the caller. Once that thread stopped (interpreter exit) `fn` is dropped
/// without running, on the caller's thread.
void run_later(std::function<void()> fn);

class TandemWork final : public c10d::Work {
 public:
  /// `outputs`: what result() and the future's value hold. `timeout`: the deadline of
  /// wait() without one (the process group's timeout).
  TandemWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
             std::chrono::milliseconds timeout);

  /// Starts tracking: the work completes when every one of `parts` has; `on_success` then
  /// runs once (copy-back) before it does. `keep` holds tensors the operations read or write
  /// until then. Call once, after every part was submitted.
  void track(std::vector<std::shared_ptr<tandem::Work>> parts, std::function<void()> on_success,
             std::vector<at::Tensor> keep = {});
  /// A work that completed already (nothing to communicate).
  void complete_now();
  /// Starts tracking other works instead of operations (a coalescing block): this one
  /// completes, with the first error among them, once each of `works` completed (its
  /// copy-back included). Call once.
  void track_works(const std::vector<c10::intrusive_ptr<TandemWork>>& works);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
#if TANDEM_HAVE_FUTURE_RESULT
  /// A future that completes, never with an error, with the c10d::WorkResult of this work:
  /// SUCCESS, TIMEOUT (a deadline passed) or COMM_ERROR (any other failure).
  c10::intrusive_ptr<c10::ivalue::Future> getFutureResult() override;
#endif
  std::vector<at::Tensor> result() override;
  /// CUDA: the current stream waits for the call's stream (no host wait); nothing on CPU.
  void synchronize() override;
  /// A receive's sender once it completed (recv without src: the rank matched), else -1.
  int sourceRank() const override;

 private:
  void part_completed(const std::shared_ptr<tandem::Work>& part);
  /// Counts one tracked part or work as done, with its error if it failed; the last one
  /// completes this work.
  void one_completed(std::exception_ptr error);
  /// Runs `fn` once this work completed: now if it has, else when it does.
  void when_done(std::function<void()> fn);
  void complete_future();

  std::vector<at::Tensor> outputs_;
  /// CUDA outputs: the stream current when the call was made.
  std::optional<c10::Stream> stream_;
  std::chrono::milliseconds timeout_;
  std::vector<std::shared_ptr<tandem::Work>> parts_;
  std::function<void()> on_success_;
  // The calling thread's torch state (inference mode, grad mode, ...), under which
  // on_success_ runs on whichever thread completes the work: a copy-back into tensors made
  // under torch.inference_mode() must run in inference mode too.
  std::optional<at::ThreadLocalState> caller_state_;
  std::vector<at::Tensor> keep_;
  std::atomic<int> remaining_{0};
  std::exception_ptr first_error_;  // guarded by mutex_ (the base class's)
  bool future_requested_ = false;   // guarded by mutex_
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::atomic<bool> future_completed_{false};
  std::vector<std::function<void()>> listeners_;  // guarded by mutex_
};

}  // namespace tandem::python
