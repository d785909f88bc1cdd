// Ordering. Operations of one communicator run in call order, one thread at a time owning
// the mesh. A blocking call with nothing queued runs inline on the caller's thread (no
// thread hop, no allocation); otherwise it is queued behind the others and waited for.
// Asynchronous calls go to the worker thread (worker.cpp). The first failure poisons the
// communicator: the mesh is aborted (the peers learn of it) and every later operation
// fails at once with the same code.

#include "comm/diag/validate.hpp"
#include "comm/diag/verify.hpp"
#include "comm/exec/local.hpp"
#include "comm/impl.hpp"
#include "core/futex.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <system_error>
#include <thread>

namespace tandem {

using comm::Op;
using comm::OpWork;

namespace comm {

std::string describe(const Op& op) {
  const auto& c = op.call;
  const std::string algo = op.algorithm != nullptr ? std::string(op.algorithm->name())
                           : op.device.is_cpu()    ? std::string("local")
                                                   : fmt::format("on {}", op.device.str());
  const auto dtype = to_string(shape_dtype(c));
  const auto count = shape_count(c);
  switch (c.kind) {
    case CollectiveKind::send:
      return fmt::format("send to rank {} ({} x {}, tag {})", c.root, dtype, count, op.user_tag);
    case CollectiveKind::recv:
      if (c.root == kAnySource)
        return fmt::format("recv from any rank ({} x {}, tag {})", dtype, count, op.user_tag);
      return fmt::format("recv from rank {} ({} x {}, tag {})", c.root, dtype, count, op.user_tag);
    case CollectiveKind::barrier:
      return fmt::format("barrier #{} ({})", c.seq, algo);
    case CollectiveKind::broadcast:
    case CollectiveKind::reduce:
    case CollectiveKind::gather:
    case CollectiveKind::scatter:
      return fmt::format("{} #{} ({} x {}, root {}, {})", to_string(c.kind), c.seq, dtype, count,
                         c.root, algo);
    default:
      return fmt::format("{} #{} ({} x {}, {})", to_string(c.kind), c.seq, dtype, count, algo);
  }
}

}  // namespace comm

namespace {

// Sets the call's sequence number and tag from the executor state it was taken from.
void assign_sequence(Op& op, std::uint64_t state) {
  auto& c = op.call;
  c.seq = state / comm::Queue::kSeqOne;
  // Point to point does not advance the collective sequence; sender and receiver derive
  // the same tag from the user's tag and the message shape.
#ifdef TANDEM_NO_CALL_CHECKS  // only to measure what the default checks cost (README)
  if (!comm::is_p2p(c.kind)) {
    c.tag = 0;
    return;
  }
#endif
  c.tag = algorithms::fingerprint_with(op.shape_print, comm::is_p2p(c.kind) ? op.user_tag : c.seq);
}

// How far `op` advances the executor state's sequence number.
std::uint64_t sequence_step(const Op& op) noexcept {
  return comm::is_p2p(op.call.kind) ? 0 : comm::Queue::kSeqOne;
}

// Each thread's own address: what Queue::biased_to names.
thread_local const char this_thread_token = 0;

}  // namespace

void Communicator::Impl::bias_to_caller() {
  if (id.size == 1 || !core::asymmetric_fences()) return;
  exec.state.fetch_or(comm::Queue::kOwned, std::memory_order_relaxed);
  exec.biased_to.store(&this_thread_token, std::memory_order_release);
}

void Communicator::Impl::unbias() {
  if (exec.biased_to.load(std::memory_order_acquire) == nullptr) return;
  std::lock_guard guard(exec.bias_mutex);
  if (exec.biased_to.load(std::memory_order_relaxed) == nullptr) return;  // revoked meanwhile
  // A Dekker pair: the biased thread sets bias_busy, then reads bias_revoked, with a compiler
  // barrier between; this side sets bias_revoked, then reads bias_busy, with a barrier on
  // every running thread of the process between. One of the two sees the other.
  exec.bias_revoked.store(true, std::memory_order_relaxed);
  core::heavy_fence();
  // Its call in progress, if any, ends by its deadline. Revoking happens once per
  // communicator at most: yield, then sleep briefly while it runs.
  for (int i = 0; exec.bias_busy.load(std::memory_order_acquire); ++i) {
    if (i < 1000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  exec.state.fetch_and(~comm::Queue::kOwned, std::memory_order_release);
  exec.biased_to.store(nullptr, std::memory_order_release);
}

void Communicator::Impl::run_blocking(Op& op, std::span<const std::size_t> counts) {
  const std::uint64_t step = sequence_step(op);
  if (exec.biased_to.load(std::memory_order_relaxed) == &this_thread_token) {
    // The mesh is biased to this thread: nothing else touches the state word until it is
    // revoked, and a revocation waits for bias_busy to clear.
    exec.bias_busy.store(true, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (!exec.bias_revoked.load(std::memory_order_relaxed)) {
      struct Release {
        Impl* self;
        ~Release() { self->exec.bias_busy.store(false, std::memory_order_release); }
      } release{this};
      const std::uint64_t s = exec.state.load(std::memory_order_relaxed);
      exec.state.store(s + step, std::memory_order_relaxed);
      assign_sequence(op, s);
      execute(op, s / comm::Queue::kSeqOne, op.issued);  // just made: no clock read
      return;
    }
    exec.bias_busy.store(false, std::memory_order_release);
  }
  unbias();  // another thread's bias, or this one's being revoked
  // Nothing queued or running: claim the mesh and the sequence number in one step and run
  // on this thread, without a lock.
  std::uint64_t s = exec.state.load(std::memory_order_relaxed);
  while ((s & (comm::Queue::kOwned | comm::Queue::kQueued)) == 0) {
    if (exec.state.compare_exchange_weak(s, (s + step) | comm::Queue::kOwned,
                                         std::memory_order_acquire, std::memory_order_relaxed)) {
      assign_sequence(op, s);
      struct Release {
        Impl* self;
        ~Release() { self->release_mesh(); }
      } release{this};
      execute(op, s / comm::Queue::kSeqOne, op.issued);  // just made: no clock read
      return;
    }
  }
  // Earlier operations are queued or running: take a place in the queue.
  std::shared_ptr<OpWork> work;
  {
    std::lock_guard guard(exec.mutex);
    work = enqueue(op, counts);
    exec.wanted = true;  // this caller waits for the worker to run it
  }
  op.call.seq = work->op.call.seq;
  op.call.tag = work->op.call.tag;
  exec.worker_cv.notify_one();
  if (!work->finished_by(op.call.deadline)) {
    // The deadline passed. The operation's buffers live in the caller's frame, so it must
    // not start after this returns: take it out of the queue if it is still there. If it
    // started, it runs under this same deadline and ends promptly.
    std::unique_lock lock(exec.mutex);
    const auto it = std::find(exec.queue.begin(), exec.queue.end(), work);
    if (it != exec.queue.end()) {
      exec.queue.erase(it);
      ++exec.dequeued;
      if (exec.queue.empty())
        exec.state.fetch_and(~comm::Queue::kQueued, std::memory_order_relaxed);
      lock.unlock();
      const std::string message =
          fail(op, ErrorCode::Timeout,
               fmt::format("it could not start before its deadline because earlier operations "
                           "were still running (timeout {} ms)",
                           config.timeout().count()),
               false);
      TANDEM_THROW(ErrorCode::Timeout, "{}", message);
    }
    lock.unlock();
    work->finished_by(Deadline::max());
  }
  work->wait(Deadline::max());  // finished: rethrows its error, if any
}

std::shared_ptr<Work> Communicator::Impl::submit(const Op& op,
                                                 std::span<const std::size_t> counts) {
  unbias();  // the worker will claim the mesh through the state word
  std::shared_ptr<OpWork> work;
  bool wake = true;
  {
    std::lock_guard guard(exec.mutex);
    work = enqueue(op, counts);
    // Lazy start: a polling worker finds it by itself, unless a waiter runs it first. A
    // send or receive only the worker runs; an operation queued behind one that nobody has
    // started means nobody waits for them (the caller goes on submitting).
    const bool take_now = !exec.lazy_now || comm::is_p2p(op.call.kind) ||
                          (exec.queue.size() > 1 &&
                           (exec.state.load(std::memory_order_relaxed) & comm::Queue::kOwned) == 0);
    if (take_now) exec.wanted = true;
    wake = config.lazy_start.count() == 0 || exec.worker_asleep || take_now;
  }
  if (wake) exec.worker_cv.notify_one();
  return work;
}

std::shared_ptr<OpWork> Communicator::Impl::enqueue(const Op& op,
                                                    std::span<const std::size_t> counts) {
  TANDEM_CHECK(exec.biased_to.load(std::memory_order_relaxed) == nullptr,
               "an operation was queued while the mesh was biased to a thread");
  auto work = std::make_shared<OpWork>(op, counts, config.timeout());
  work->helper = wait_helper;
  start_worker();
  exec.queue.push_back(work);
  ++exec.submitted;
  // Nothing that can fail comes after the sequence number is taken (a gap would
  // desynchronise the ranks). kQueued is set first: from then on no inline call can claim
  // the mesh and a sequence number ahead of this one.
  exec.state.fetch_or(comm::Queue::kQueued, std::memory_order_relaxed);
  assign_sequence(work->op, exec.state.fetch_add(sequence_step(op), std::memory_order_relaxed));
  if (!comm::is_p2p(op.call.kind)) work->set_sequence(static_cast<std::int64_t>(work->op.call.seq));
  return work;
}

void Communicator::Impl::release_mesh() noexcept {
  if ((exec.state.fetch_and(~comm::Queue::kOwned, std::memory_order_release) &
       comm::Queue::kQueued) == 0)
    return;
  // Operations were queued meanwhile and the worker waits for the mesh. Taking the mutex
  // orders this with the worker's look at the state, so the notification is not lost.
  {
    std::lock_guard guard(exec.mutex);
    exec.wanted = true;
  }
  exec.worker_cv.notify_one();
}

void Communicator::Impl::start_worker() {
  if (exec.worker.joinable()) return;
  try {
    exec.worker = std::thread([this] { worker_loop(); });
  } catch (const std::system_error& e) {
    TANDEM_THROW(ErrorCode::Io,
                 "could not start the communicator's worker thread for asynchronous operations "
                 "({}); the process may have hit its thread limit (ulimit -u)",
                 e.what());
  }
}

void Communicator::Impl::execute(const Op& op, std::uint64_t seq, Clock::time_point now) {
  if (failure.poisoned.load(std::memory_order_acquire)) throw_poisoned(op);
  const auto& c = op.call;
  if (now == Clock::time_point{}) now = Clock::now();
  const std::string_view algo = op.algorithm != nullptr ? op.algorithm->name()
                                : op.device.is_cpu()    ? std::string_view("local")
                                                        : std::string_view("device");
  const auto ticket =
      diag.recorder.start(c.kind, op.shape_dtype, op.shape_count, c.root, seq, algo, now);
#ifdef TANDEM_NO_CALL_CHECKS
  const bool collective = false;
#else
  const bool collective = diag.monitor && !comm::is_p2p(c.kind);
#endif
  if (collective) diag.monitor->entered(c.kind, op.shape_dtype, op.shape_count, c.root, seq, now);
  if (diag.trace) [[unlikely]]
    comm::trace_begin(*diag.trace, op, now);
  try {
    if (now >= c.deadline) {
      TANDEM_THROW(ErrorCode::Timeout,
                   "its deadline passed before it could start (earlier operations took too long; "
                   "timeout {} ms)",
                   config.timeout().count());
    }
    const algorithms::Algorithm* ran = nullptr;
    if (!op.device.is_cpu()) {
      device_for(op.device).run(c);
    } else if (op.algorithm == nullptr) {
      comm::run_local(c);
    } else {
      if (config.verify_calls && !comm::is_p2p(c.kind)) comm::verify_call(*mesh, c);
      algorithms::Context& ctx = *context;
      ctx.ran = nullptr;
      op.algorithm->run(c, ctx);
      ran = ctx.ran != nullptr ? ctx.ran : op.algorithm;
    }
    // Stored only when they change: a repeated call's stores are what it waits for.
    if (diag.last_algorithm.load(std::memory_order_relaxed) != ran)
      diag.last_algorithm.store(ran, std::memory_order_release);
    const bool on_device = !op.device.is_cpu();
    if (diag.last_on_device.load(std::memory_order_relaxed) != on_device)
      diag.last_on_device.store(on_device, std::memory_order_release);
    // The record names the algorithm that ran where the chosen one handed the call on.
    diag.recorder.finish(ticket, true, ran != op.algorithm ? ran->name() : std::string_view());
    if (diag.trace) [[unlikely]]
      comm::trace_end(*diag.trace, op, ran, Clock::now());
    if (collective) diag.monitor->completed(seq);
  } catch (...) {
    failed(op, ticket);
  }
}

// Out of execute()'s frame: its strings cost the latency path stores.
void Communicator::Impl::failed(const Op& op, std::uint64_t ticket) {
  ErrorCode code = ErrorCode::Internal;
  std::string what;
  try {
    throw;
  } catch (const Error& e) {
    code = e.code();
    what = e.message();
  } catch (const std::exception& e) {
    what = fmt::format("unexpected exception (a bug in tandem; please report it): {}", e.what());
  }
  diag.recorder.finish(ticket, false);
  if (diag.trace) diag.trace->close(Clock::now(), what);
  if (code == ErrorCode::Timeout && diag.monitor) {
    // The peer a rank waited for may itself wait for another: the progress reports (stable
    // for as long as the collective hung) name the rank that never came.
    if (auto who = diag.monitor->diagnose_failure(Clock::now()))
      what += fmt::format(". The ranks' progress reports: {}", *who);
  }
  std::string message = fail(op, code, what);
  if (code == ErrorCode::Mismatch && diag.monitor &&
      message.find("the ranks disagree") == std::string::npos) {
    // The mismatch shows this rank's call and the peer's tag; the ranks' failure records
    // show every call.
    if (auto calls = diag.monitor->diagnose_failure(deadline_in(comm::Monitor::kPublishWait)))
      message += fmt::format(". What each rank called: {}", *calls);
  }
  TANDEM_THROW(code, "{}", message);
}

std::string Communicator::Impl::fail(const Op& op, ErrorCode code, std::string_view what,
                                     bool owns_mesh) {
  std::string message = fmt::format("{} failed: {}", comm::describe(op), what);
  if (!failure.poisoned.load(std::memory_order_acquire)) poison(code, message);
  // The monitor may have poisoned the communicator (a mismatch found from the ranks'
  // progress): the operation it failed is still the one to report.
  if (!failure.reported.exchange(true)) {
    // The recorder belongs to the thread that owns the mesh.
    if (owns_mesh) TANDEM_WARN(coll, "flight recorder: {}", diag.recorder.dump());
    // For the other ranks' reports and tandemrun's.
    if (diag.monitor) diag.monitor->publish_failure(message, owns_mesh ? &diag.recorder : nullptr);
    // A job that fails is when its timeline is wanted: write it now, the process may not
    // get to destroy the communicator.
    if (diag.trace && owns_mesh) diag.trace->sink().flush();
  }
  if (mesh && owns_mesh) {
    // Requests that were posted when the failure struck (an algorithm's, already unwound,
    // or the worker's) are forgotten by the mesh now, before anything could touch them.
    try {
      mesh->test({});
    } catch (const Error&) {
    }
  }
  return message;
}

void Communicator::Impl::poison(ErrorCode code, const std::string& message) noexcept {
  try {
    {
      std::lock_guard guard(failure.mutex);
      if (failure.error) return;
      failure.error = std::make_exception_ptr(Error(code, message));
      failure.code = code;
      failure.message = message;
      failure.poisoned.store(true, std::memory_order_release);
    }
    TANDEM_WARN(coll, "{}", message);
    if (mesh && !mesh->error()) mesh->abort(Error(code, message));
    if (auto* device = device_live.load(std::memory_order_acquire)) device->abort();
  } catch (...) {
    // Out of memory while formatting: the mesh and the operations still fail on their own.
  }
}

void Communicator::Impl::throw_poisoned(const Op& op) const {
  ErrorCode code;
  std::string message;
  {
    std::lock_guard guard(failure.mutex);
    code = failure.code;
    message = failure.message;
  }
  TANDEM_THROW(code,
               "communicator poisoned: {} ({} was not run; destroy this communicator and create a "
               "new one on every rank)",
               message, comm::describe(op));
}

comm::DeviceBackend& Communicator::Impl::device_for(Device device) {
  if (!device_backend) {
    comm::DeviceSetup setup;
    setup.rank = id.rank;
    setup.size = id.size;
    setup.device = device;
    setup.store = rendezvous.store;
    setup.timeout = config.timeout();
    setup.label = fmt::format("communicator '{}'", rendezvous.prefix);
    // The mesh's control connections notice a death at once; the store's watch (a round
    // trip) is asked every kLivenessPoll.
    setup.check_peers_async = rendezvous.check_peers;  // the store: safe from any thread
    setup.on_failure = [this](const Error& e) { poison(e.code(), e.message()); };
    setup.check_peers = [this, next = Clock::time_point{}]() mutable {
      if (mesh) mesh->check_alive();
      if (!rendezvous.check_peers) return;
      const auto now = Clock::now();
      if (now < next) return;
      next = now + transport::kLivenessPoll;
      rendezvous.check_peers();
    };
    device_backend = comm::make_device_backend(setup);
    device_live.store(device_backend.get(), std::memory_order_release);
  }
  TANDEM_CHECK_ARG(device_backend->device() == device,
                   "communicator '{}' runs its device collectives on {} ({}); a call on {} needs "
                   "a communicator of its own (one device per rank and communicator, as in NCCL)",
                   rendezvous.prefix, device_backend->device().str(), device_backend->name(),
                   device.str());
  return *device_backend;
}

void Communicator::Impl::run_if_next(const OpWork* work) {
  std::shared_ptr<OpWork> next;
  {
    std::lock_guard guard(exec.mutex);
    exec.lazy_now = true;  // the caller waits right away: waking the worker at submit() is wasted
    if (exec.stopping || exec.queue.empty()) return;
    std::uint64_t s = exec.state.load(std::memory_order_relaxed);
    // The mesh is free only when nothing runs: no inline call, no collective on the worker,
    // no send/recv in flight (the worker keeps it while any is).
    if ((s & comm::Queue::kOwned) != 0) return;
    if (exec.queue.front().get() != work || comm::is_p2p(work->op.call.kind)) {
      // Operations ahead of it that nobody started (under lazy start the worker may be
      // between polls), or a send/recv, which only the worker runs: it takes them now, and
      // the next submits wake it too (this caller did not wait for those before).
      exec.lazy_now = false;
      exec.wanted = true;
    } else if (exec.state.compare_exchange_strong(s, s | comm::Queue::kOwned,
                                                  std::memory_order_acquire,
                                                  std::memory_order_relaxed)) {
      next = std::move(exec.queue.front());
      exec.queue.pop_front();
      ++exec.dequeued;
      if (exec.queue.empty()) {
        exec.state.fetch_and(~comm::Queue::kQueued, std::memory_order_relaxed);
        exec.wanted = false;
      }
      ++exec.active;
    } else {
      return;
    }
  }
  if (!next) {
    exec.worker_cv.notify_one();
    return;
  }
  run_collective(next);
  release_mesh();
}

void Communicator::Impl::start_soon() {
  {
    std::lock_guard guard(exec.mutex);
    if (exec.queue.empty()) return;  // it started already
    exec.lazy_now = false;           // nor will the next ones be waited for, most likely
    exec.wanted = true;
  }
  exec.worker_cv.notify_one();
}

void Communicator::Impl::shutdown() noexcept {
  {
    // Waits for a waiting thread that runs an operation itself (OpWork::run_if_next).
    std::lock_guard guard(wait_helper->mutex);
    wait_helper->impl = nullptr;
  }
  if (diag.monitor) diag.monitor->stop();
  std::deque<std::shared_ptr<OpWork>> dropped;
  bool running = false;
  {
    std::lock_guard guard(exec.mutex);
    exec.stopping = true;
    dropped.swap(exec.queue);
    exec.state.fetch_and(~comm::Queue::kQueued, std::memory_order_relaxed);
    running = exec.active > 0;
  }
  if (running) {
    // Waiting for it could take until its deadline (minutes) if the peers never join.
    poison(ErrorCode::Aborted,
           fmt::format("the communicator was destroyed on rank {} while an asynchronous "
                       "operation was still running (wait() for it before destroying the "
                       "communicator)",
                       id.rank));
  }
  for (auto& w : dropped) {
    try {
      w->mark_failed(std::make_exception_ptr(
          Error(ErrorCode::Aborted,
                fmt::format("{} was not run: the communicator was destroyed first (wait() for "
                            "asynchronous work before destroying the communicator)",
                            comm::describe(w->op)))));
    } catch (...) {
      w->mark_failed(nullptr);
    }
  }
  exec.worker_cv.notify_all();
  if (exec.worker.joinable()) exec.worker.join();
  if (device_backend) {
    device_live.store(nullptr, std::memory_order_release);
    device_backend.reset();  // before the mesh: it may still ask it about the peers
  }
  if (mesh) mesh->close();
  if (rendezvous.registered_lost && !failure.poisoned.load(std::memory_order_acquire)) {
    // A normal end: this rank's disconnect must not read as a death. (After a failure it may
    // well read as one, and the store may be out of reach: nothing to cancel then.)
    try {
      rendezvous.base_store->set_on_disconnect(rendezvous.lost_key, {});
    } catch (const Error& e) {
      TANDEM_DETAIL(init, "communicator '{}': {}", rendezvous.prefix, e.message());
    }
  }
}

}  // namespace tandem
