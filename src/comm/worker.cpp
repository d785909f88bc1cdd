// The worker thread: runs queued operations in call order. A collective runs to completion.
// A send or recv is posted and left in flight while the worker moves on, so that a rank may
// post a recv and then a send (a ring exchange) without waiting for the recv first; the
// transport keeps every peer's messages in posting order, so the order of operations on the
// wire is still the call order. While only point-to-point operations are in flight and
// nothing is queued, the worker polls the mesh and sleeps on the queue, because a blocking
// wait on the mesh could not see a new operation arrive.

#include "comm/impl.hpp"
#include "comm/validate.hpp"
#include "core/futex.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

namespace tandem {

using comm::OpWork;

namespace {

constexpr auto kMinPause = std::chrono::microseconds(20);
constexpr auto kMaxPause = std::chrono::microseconds(1000);
// Lazy start: polls of an idle worker before it sleeps until woken (256 x 200 us: 51 ms).
constexpr int kLazyPolls = 256;

}  // namespace

void Communicator::Impl::worker_loop() {
  // Claims the mesh unless an inline call owns it (that call wakes this thread when done).
  const auto claim_mesh = [this] {
    std::uint64_t s = state.load(std::memory_order_relaxed);
    while ((s & kOwned) == 0)
      if (state.compare_exchange_weak(s, s | kOwned, std::memory_order_acquire,
                                      std::memory_order_relaxed))
        return true;
    return false;
  };
  const auto give_up_mesh = [this] { state.fetch_and(~kOwned, std::memory_order_release); };
  std::unique_lock lock(mutex);
  std::chrono::microseconds pause = kMinPause;
  for (;;) {
    if (in_flight.empty()) {
      const auto ready = [&] { return stopping || (!queue.empty() && claim_mesh()); };
      // Lazy start: poll while operations keep coming, then sleep until woken. A poll takes
      // only an operation that was already at the front one period earlier: nobody came to
      // run it. One queued a moment ago belongs to the caller about to wait for it; taking
      // it would turn lazy start off and make every later call pay for waking this thread.
      // A notification (release_mesh(): the mesh is free and operations wait) takes it at
      // once, and so does a send or receive, which no waiting caller runs.
      const auto p2p_first = [&] {
        return !queue.empty() && comm::is_p2p(queue.front()->op.call.kind);
      };
      bool found = false;
      for (int i = 0; lazy_start.count() > 0 && lazy_now && i < kLazyPolls && !found; ++i) {
        const bool had_front = !queue.empty();
        const std::uint64_t seen = dequeued;
        const bool notified =
            p2p_first() || worker_cv.wait_for(lock, lazy_start) == std::cv_status::no_timeout;
        found = stopping || ((notified || p2p_first() || (had_front && dequeued == seen)) &&
                             !queue.empty() && claim_mesh());
      }
      if (!found) {
        worker_asleep = true;
        worker_cv.wait(lock, ready);
        worker_asleep = false;
      }
      if (stopping) return;
    } else if (stopping) {
      lock.unlock();
      fail_in_flight(ErrorCode::Aborted, "the communicator was destroyed while it was in flight");
      lock.lock();
      give_up_mesh();
      return;
    } else if (queue.empty()) {
      lock.unlock();
      bool completed = progress_p2p();
      // Spin a little first, as the transport does: a reply often is microseconds away.
      const auto spin_until = Clock::now() + spin_time;
      while (!completed && !in_flight.empty() && Clock::now() < spin_until) {
        if ((state.load(std::memory_order_relaxed) & kQueued) != 0 ||
            stopping.load(std::memory_order_relaxed))
          break;
        core::cpu_relax();
        completed = progress_p2p();
      }
      lock.lock();
      if (in_flight.empty()) {
        give_up_mesh();
        pause = kMinPause;
      } else if (completed) {
        pause = kMinPause;
      } else if (queue.empty() && !stopping) {
        worker_cv.wait_for(lock, pause);
        pause = std::min(pause * 2, kMaxPause);
      }
      continue;
    }
    // This thread owns the mesh: take the next operation.
    auto work = std::move(queue.front());
    queue.pop_front();
    ++dequeued;
    lazy_now = false;  // nobody waited for it: wake the worker for the next ones
    if (queue.empty()) state.fetch_and(~kQueued, std::memory_order_relaxed);
    ++active;
    lock.unlock();
    if (comm::is_p2p(work->op.call.kind)) {
      start_p2p(work);
    } else {
      run_collective(work);
    }
    if (!in_flight.empty()) progress_p2p();
    lock.lock();
    pause = kMinPause;
    if (in_flight.empty()) give_up_mesh();
  }
}

void Communicator::Impl::complete(const std::shared_ptr<OpWork>& work, std::exception_ptr failure) {
  if (trace) work->set_completed_at(Clock::now());
  {
    std::lock_guard guard(mutex);
    --active;
  }
  if (failure) {
    work->mark_failed(std::move(failure));
  } else {
    work->mark_done();
  }
}

void Communicator::Impl::run_collective(const std::shared_ptr<OpWork>& work) {
  std::exception_ptr failure;
  try {
    execute(work->op);
  } catch (...) {
    failure = std::current_exception();
  }
  // The mesh is poisoned now: posted sends/recvs cannot complete.
  if (failure && !in_flight.empty()) fail_in_flight(ErrorCode::Internal, {});
  complete(work, std::move(failure));
}

void Communicator::Impl::start_p2p(const std::shared_ptr<OpWork>& work) {
  const auto& c = work->op.call;
  if (poisoned.load(std::memory_order_acquire)) {
    try {
      throw_poisoned(work->op);
    } catch (...) {
      complete(work, std::current_exception());
    }
    return;
  }
  const auto now = Clock::now();
  work->posted_at = now;
  work->ticket = recorder.start(c.kind, comm::shape_dtype(c), comm::shape_count(c), c.root, c.seq,
                                work->op.algorithm ? work->op.algorithm->name() : "direct", now);
  ErrorCode code = ErrorCode::Timeout;
  std::string what;
  if (now >= c.deadline) {
    what =
        fmt::format("its deadline passed before it could start (timeout {} ms)", timeout.count());
  } else {
    work->request = c.kind == CollectiveKind::send
                        ? transport::Request::make_send(c.root, c.tag, c.in.data, c.in.bytes())
                        : transport::Request::make_recv(c.root, c.tag, c.out.data, c.out.bytes());
    try {
      mesh->post(work->request);
      in_flight.push_back(work);
      return;
    } catch (const Error& e) {
      code = e.code();
      what = e.message();
    } catch (const std::exception& e) {
      code = ErrorCode::Internal;
      what = fmt::format("unexpected exception (a bug in tandem; please report it): {}", e.what());
    }
  }
  recorder.finish(work->ticket, false);
  if (trace) comm::trace_op(*trace, work->op, now, Clock::now(), what);
  const std::string message = fail(work->op, code, what);
  fail_in_flight(code, {});
  complete(work, std::make_exception_ptr(Error(code, message, __FILE__, __LINE__)));
}

bool Communicator::Impl::progress_p2p() {
  if (poisoned.load(std::memory_order_acquire)) {
    fail_in_flight(ErrorCode::Internal, {});
    return true;
  }
  std::vector<transport::Request*> requests;
  requests.reserve(in_flight.size());
  for (const auto& w : in_flight) requests.push_back(&w->request);
  try {
    mesh->test(requests);
  } catch (const Error& e) {
    fail_in_flight(e.code(), e.message());
    return true;
  } catch (const std::exception& e) {
    fail_in_flight(
        ErrorCode::Internal,
        fmt::format("unexpected exception (a bug in tandem; please report it): {}", e.what()));
    return true;
  }
  bool completed = false;
  for (std::size_t i = 0; i < in_flight.size();) {
    if (!in_flight[i]->request.complete) {
      ++i;
      continue;
    }
    auto work = std::move(in_flight[i]);
    in_flight.erase(in_flight.begin() + static_cast<std::ptrdiff_t>(i));
    recorder.finish(work->ticket, true);
    if (trace) comm::trace_op(*trace, work->op, work->posted_at, Clock::now());
    complete(work, nullptr);
    completed = true;
  }
  const auto now = Clock::now();
  const auto expired = std::find_if(in_flight.begin(), in_flight.end(),
                                    [&](const auto& w) { return now >= w->op.call.deadline; });
  if (expired != in_flight.end()) {
    // The expired one goes first: it carries the cause, the others the poison.
    std::rotate(in_flight.begin(), expired, expired + 1);
    const auto& r = in_flight.front()->request;
    fail_in_flight(ErrorCode::Timeout,
                   fmt::format("it did not complete before its deadline (timeout {} ms; {} of {} "
                               "bytes moved): rank {} never posted the matching {}",
                               timeout.count(), r.done, r.bytes, r.peer,
                               r.kind == transport::RequestKind::send ? "recv" : "send"));
    return true;
  }
  return completed;
}

void Communicator::Impl::fail_in_flight(ErrorCode code, std::string_view what) {
  if (in_flight.empty()) return;
  std::vector<std::exception_ptr> errors(in_flight.size());
  for (std::size_t i = 0; i < in_flight.size(); ++i) {
    const auto& w = in_flight[i];
    recorder.finish(w->ticket, false);
    if (trace)
      comm::trace_op(
          *trace, w->op, w->posted_at, Clock::now(),
          what.empty() ? std::string_view("failed: the communicator was poisoned") : what);
    if (!poisoned.load(std::memory_order_acquire)) {
      errors[i] = std::make_exception_ptr(Error(code, fail(w->op, code, what), __FILE__, __LINE__));
    } else {
      try {
        throw_poisoned(w->op);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  }
  // The mesh is poisoned: this makes it forget the posted requests before their Works
  // complete and their buffers may go away.
  try {
    mesh->test({});
  } catch (const Error&) {
  }
  auto works = std::move(in_flight);
  in_flight.clear();
  for (std::size_t i = 0; i < works.size(); ++i) complete(works[i], std::move(errors[i]));
}

}  // namespace tandem
