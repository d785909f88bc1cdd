// The worker thread: runs queued operations in call order. A collective runs to completion.
// A send or recv is posted and left in flight while the worker moves on, so that a rank may
// post a recv and then a send (a ring exchange) without waiting for the recv first; the
// transport keeps every peer's messages in posting order, so the order of operations on the
// wire is still the call order. While only point-to-point operations are in flight and
// nothing is queued, the worker polls the mesh and sleeps on the queue, because a blocking
// wait on the mesh could not see a new operation arrive.

#include "comm/diag/validate.hpp"
#include "comm/impl.hpp"
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
// Lazy start: each poll that finds nothing to take doubles the next one's wait, up to 256
// periods (0.2, 0.4, ..., 51.2 ms at 200 us); one that takes an operation resets it.
constexpr int kLazyBackoff = 256;

}  // namespace

void Communicator::Impl::worker_loop() {
  // Claims the mesh unless an inline call owns it (that call wakes this thread when done).
  const auto claim_mesh = [this] {
    std::uint64_t s = exec.state.load(std::memory_order_relaxed);
    while ((s & comm::Queue::kOwned) == 0)
      if (exec.state.compare_exchange_weak(s, s | comm::Queue::kOwned, std::memory_order_acquire,
                                           std::memory_order_relaxed))
        return true;
    return false;
  };
  const auto give_up_mesh = [this] {
    exec.state.fetch_and(~comm::Queue::kOwned, std::memory_order_release);
  };
  // The next queued operation waits for an unmatched receive from any rank (the caller
  // holds exec.mutex).
  const auto held_back = [this] {
    return !exec.queue.empty() && exec.queue.front()->op.call.kind != CollectiveKind::send &&
           any_source_unmatched();
  };
  std::unique_lock lock(exec.mutex);
  std::chrono::microseconds pause = kMinPause;
  std::chrono::microseconds period = config.lazy_start;  // of the lazy-start polls
  for (;;) {
    if (exec.in_flight.empty()) {
      // Lazy start: poll while operations keep coming, then sleep until woken. A poll takes
      // only an operation that was already at the front one period earlier: nobody came to
      // run it. One queued a moment ago belongs to the caller about to wait for it; taking
      // it would turn lazy start off and make every later call pay for waking this thread.
      // A notification (release_mesh(): the mesh is free and operations wait) takes it at
      // once, and so does a send or receive, which no waiting caller runs.
      const auto p2p_first = [&] {
        return !exec.queue.empty() && comm::is_p2p(exec.queue.front()->op.call.kind);
      };
      // Each poll that finds nothing to take doubles the period, up to kLazyBackoff periods,
      // and the period stays long while callers keep waiting for what they submit
      // (torch.distributed's blocking calls): on a host with as many ranks as cores, every
      // poll preempts a rank in the middle of a collective and its peers wait for it
      // (docs/python.md). A whole longest period without a submit() sends the worker to sleep
      // until the next one.
      bool found = false;
      std::uint64_t submitted = exec.submitted;
      while (config.lazy_start.count() > 0 && exec.lazy_now && !found) {
        const bool had_front = !exec.queue.empty();
        const std::uint64_t seen = exec.dequeued;
        if (!had_front) exec.wanted = false;  // what it was wanted for ran meanwhile
        // Woken for good (exec.wanted: see submit(), release_mesh(), start_soon()) once the
        // mesh is free; a send or receive needs no wake-up.
        const bool notified = exec.worker_cv.wait_for(lock, period, [&] {
          return exec.stopping.load(std::memory_order_relaxed) ||
                 ((exec.wanted || p2p_first()) &&
                  (exec.state.load(std::memory_order_relaxed) & comm::Queue::kOwned) == 0);
        });
        found =
            exec.stopping || ((notified || p2p_first() || (had_front && exec.dequeued == seen)) &&
                              !exec.queue.empty() && claim_mesh());
        if (found) {
          period = config.lazy_start;
        } else if (period >= kLazyBackoff * config.lazy_start && exec.submitted == submitted) {
          break;
        } else {
          period = std::min(period * 2, kLazyBackoff * config.lazy_start);
          submitted = exec.submitted;
        }
      }
      if (!found) {
        // Under lazy start, a submit() that wakes this thread from its sleep starts a new
        // round of polls: the caller about to wait runs the operation itself.
        const bool lazy = config.lazy_start.count() > 0;
        bool claimed = false;
        exec.worker_asleep = true;
        exec.worker_cv.wait(lock, [&] {
          if (exec.stopping) return true;
          if (exec.queue.empty()) return false;
          if (lazy && exec.lazy_now && !exec.wanted && !p2p_first()) return true;
          claimed = claim_mesh();
          return claimed;
        });
        exec.worker_asleep = false;
        period = config.lazy_start;  // a burst after a quiet spell: poll briskly again
        if (!claimed && !exec.stopping) continue;
      }
      if (exec.stopping) return;
    } else if (exec.stopping) {
      lock.unlock();
      fail_in_flight(ErrorCode::Aborted, "the communicator was destroyed while it was in flight");
      lock.lock();
      give_up_mesh();
      return;
    } else if (exec.queue.empty() || held_back()) {
      lock.unlock();
      bool completed = progress_p2p();
      // Spin a little first, as the transport does: a reply often is microseconds away.
      const auto spin_until = Clock::now() + config.spin_time;
      while (!completed && !exec.in_flight.empty() && Clock::now() < spin_until) {
        if ((exec.state.load(std::memory_order_relaxed) & comm::Queue::kQueued) != 0 ||
            exec.stopping.load(std::memory_order_relaxed))
          break;
        core::cpu_relax();
        completed = progress_p2p();
      }
      lock.lock();
      if (exec.in_flight.empty()) {
        give_up_mesh();
        pause = kMinPause;
      } else if (completed) {
        pause = kMinPause;
      } else if ((exec.queue.empty() || held_back()) && !exec.stopping) {
        exec.worker_cv.wait_for(lock, pause);
        pause = std::min(pause * 2, kMaxPause);
      }
      continue;
    }
    // This thread owns the mesh: take the next operation.
    auto work = std::move(exec.queue.front());
    exec.queue.pop_front();
    ++exec.dequeued;
    exec.lazy_now = false;  // nobody waited for it: wake the worker for the next ones
    if (exec.queue.empty()) {
      exec.state.fetch_and(~comm::Queue::kQueued, std::memory_order_relaxed);
      exec.wanted = false;
    }
    ++exec.active;
    lock.unlock();
    // A send or receive of device memory is the device backend's (NCCL's), run as a
    // collective is; the mesh moves host memory only.
    if (comm::is_p2p(work->op.call.kind) && work->op.device.is_cpu()) {
      start_p2p(work);
    } else {
      run_collective(work);
    }
    if (!exec.in_flight.empty()) progress_p2p();
    lock.lock();
    pause = kMinPause;
    if (exec.in_flight.empty()) give_up_mesh();
  }
}

void Communicator::Impl::complete(const std::shared_ptr<OpWork>& work, std::exception_ptr thrown) {
  if (diag.trace) work->set_completed_at(Clock::now());
  if (!thrown && work->op.call.kind == CollectiveKind::recv) work->set_source(work->request.peer);
  {
    std::lock_guard guard(exec.mutex);
    --exec.active;
  }
  if (thrown) {
    work->mark_failed(std::move(thrown));
  } else {
    work->mark_done();
  }
}

void Communicator::Impl::run_collective(const std::shared_ptr<OpWork>& work) {
  std::exception_ptr thrown;
  try {
    execute(work->op, work->op.call.seq);
  } catch (...) {
    thrown = std::current_exception();
  }
  // The mesh is poisoned now: posted sends/recvs cannot complete.
  if (thrown && !exec.in_flight.empty()) fail_in_flight(ErrorCode::Internal, {});
  complete(work, std::move(thrown));
}

void Communicator::Impl::start_p2p(const std::shared_ptr<OpWork>& work) {
  const auto& c = work->op.call;
  if (failure.poisoned.load(std::memory_order_acquire)) {
    try {
      throw_poisoned(work->op);
    } catch (...) {
      complete(work, std::current_exception());
    }
    return;
  }
  const auto now = Clock::now();
  work->posted_at = now;
  work->ticket =
      diag.recorder.start(c.kind, work->op.shape_dtype, work->op.shape_count, c.root, c.seq,
                          work->op.algorithm ? work->op.algorithm->name() : "direct", now);
  ErrorCode code = ErrorCode::Timeout;
  std::string what;
  if (now >= c.deadline) {
    what = fmt::format("its deadline passed before it could start (timeout {} ms)",
                       config.timeout().count());
  } else {
    work->request = c.kind == CollectiveKind::send
                        ? transport::Request::make_send(c.root, c.tag, c.in.data, c.in.bytes())
                        : transport::Request::make_recv(c.root, c.tag, c.out.data, c.out.bytes());
    try {
      // A receive from any rank is posted once a peer's message matches it (progress_p2p).
      if (c.root != kAnySource) mesh->post(work->request);
      exec.in_flight.push_back(work);
      return;
    } catch (const Error& e) {
      code = e.code();
      what = e.message();
    } catch (const std::exception& e) {
      code = ErrorCode::Internal;
      what = fmt::format("unexpected exception (a bug in tandem; please report it): {}", e.what());
    }
  }
  diag.recorder.finish(work->ticket, false);
  if (diag.trace) comm::trace_op(*diag.trace, work->op, now, Clock::now(), what);
  const std::string message = fail(work->op, code, what);
  fail_in_flight(code, {});
  complete(work, std::make_exception_ptr(Error(code, message, __FILE__, __LINE__)));
}

bool Communicator::Impl::progress_p2p() {
  if (failure.poisoned.load(std::memory_order_acquire)) {
    fail_in_flight(ErrorCode::Internal, {});
    return true;
  }
  // Unmatched receives from any rank are waited for too (never complete, never posted): a
  // peer that dies meanwhile fails them, as it fails every receive.
  std::vector<transport::Request*> requests;
  requests.reserve(exec.in_flight.size());
  for (const auto& w : exec.in_flight) requests.push_back(&w->request);
  try {
    match_any_source();
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
  for (std::size_t i = 0; i < exec.in_flight.size();) {
    if (!exec.in_flight[i]->request.complete) {
      ++i;
      continue;
    }
    auto work = std::move(exec.in_flight[i]);
    exec.in_flight.erase(exec.in_flight.begin() + static_cast<std::ptrdiff_t>(i));
    diag.recorder.finish(work->ticket, true);
    if (diag.trace) comm::trace_op(*diag.trace, work->op, work->posted_at, Clock::now());
    complete(work, nullptr);
    completed = true;
  }
  const auto now = Clock::now();
  const auto expired = std::find_if(exec.in_flight.begin(), exec.in_flight.end(),
                                    [&](const auto& w) { return now >= w->op.call.deadline; });
  if (expired != exec.in_flight.end()) {
    // The expired one goes first: it carries the cause, the others the poison.
    std::rotate(exec.in_flight.begin(), expired, expired + 1);
    const auto& r = exec.in_flight.front()->request;
    const std::string who =
        exec.in_flight.front()->unmatched()
            ? std::string("no rank sent a message it matches (same tag, count and dtype)")
            : fmt::format("rank {} never posted the matching {}", r.peer,
                          r.kind == transport::RequestKind::send ? "recv" : "send");
    fail_in_flight(ErrorCode::Timeout,
                   fmt::format("it did not complete before its deadline (timeout {} ms; {} of {} "
                               "bytes moved): {}",
                               config.timeout().count(), r.done, r.bytes, who));
    return true;
  }
  return completed;
}

void Communicator::Impl::match_any_source() {
  for (const auto& w : exec.in_flight) {
    if (!w->unmatched()) continue;
    const int peer = mesh->probe(w->request.tag, exec.any_source_from);
    if (peer < 0) return;  // the later ones wait for this one
    w->request.peer = peer;
    mesh->post(w->request);
    exec.any_source_from = (peer + 1) % id.size;
  }
}

bool Communicator::Impl::any_source_unmatched() const noexcept {
  return std::any_of(exec.in_flight.begin(), exec.in_flight.end(),
                     [](const auto& w) { return w->unmatched(); });
}

void Communicator::Impl::fail_in_flight(ErrorCode code, std::string_view what) {
  if (exec.in_flight.empty()) return;
  std::vector<std::exception_ptr> errors(exec.in_flight.size());
  for (std::size_t i = 0; i < exec.in_flight.size(); ++i) {
    const auto& w = exec.in_flight[i];
    diag.recorder.finish(w->ticket, false);
    if (diag.trace)
      comm::trace_op(
          *diag.trace, w->op, w->posted_at, Clock::now(),
          what.empty() ? std::string_view("failed: the communicator was poisoned") : what);
    if (!failure.poisoned.load(std::memory_order_acquire)) {
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
  auto works = std::move(exec.in_flight);
  exec.in_flight.clear();
  for (std::size_t i = 0; i < works.size(); ++i) complete(works[i], std::move(errors[i]));
}

}  // namespace tandem
