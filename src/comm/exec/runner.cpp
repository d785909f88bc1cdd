#include "comm/exec/runner.hpp"

#include "comm/diag/verify.hpp"
#include "comm/exec/local.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace tandem::comm {

void Runner::execute(const Op& op, std::uint64_t seq, Clock::time_point now) {
  if (failure.poisoned.load(std::memory_order_acquire)) throw_poisoned(op);
  const auto& c = op.call;
  if (now == Clock::time_point{}) now = Clock::now();
  const std::string_view algo = op.algorithm != nullptr ? op.algorithm->name()
                                : op.device.is_cpu()    ? std::string_view("local")
                                                        : std::string_view("device");
  const auto ticket =
      diag.recorder.start(c.kind, op.shape_dtype, op.shape_count, c.root, seq, algo, now);
  const bool collective = diag.monitor && !is_p2p(c.kind);
  if (collective) diag.monitor->entered(c.kind, op.shape_dtype, op.shape_count, c.root, seq, now);
  if (diag.trace) [[unlikely]]
    trace_begin(*diag.trace, op, now);
  try {
    if (now >= c.deadline) {
      TANDEM_THROW(ErrorCode::Timeout,
                   "its deadline passed before it could start (earlier operations took too long; "
                   "timeout {} ms)",
                   config_.timeout().count());
    }
    const algorithms::Algorithm* ran = nullptr;
    if (!op.device.is_cpu()) {
      device_for(op.device).run(c);
    } else if (op.algorithm == nullptr) {
      run_local(c);
    } else {
      if (config_.verify_calls && !is_p2p(c.kind)) verify_call(*mesh, c);
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
      trace_end(*diag.trace, op, ran, Clock::now());
    if (collective) diag.monitor->completed(seq);
  } catch (...) {
    failed(op, ticket);
  }
}

// Out of execute()'s frame: its strings cost the latency path stores.
void Runner::failed(const Op& op, std::uint64_t ticket) {
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
    if (auto calls = diag.monitor->diagnose_failure(deadline_in(Monitor::kPublishWait)))
      message += fmt::format(". What each rank called: {}", *calls);
  }
  TANDEM_THROW(code, "{}", message);
}

std::string Runner::fail(const Op& op, ErrorCode code, std::string_view what, bool owns_mesh) {
  std::string message = fmt::format("{} failed: {}", describe(op), what);
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

void Runner::poison(ErrorCode code, const std::string& message) noexcept {
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

void Runner::throw_poisoned(const Op& op) const {
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
               message, describe(op));
}

DeviceBackend& Runner::device_for(Device device) {
  if (!device_backend) {
    DeviceSetup setup;
    setup.rank = id_.rank;
    setup.size = id_.size;
    setup.device = device;
    setup.store = rendezvous_.store;
    setup.timeout = config_.shared_timeout();
    setup.label = fmt::format("communicator '{}'", rendezvous_.prefix);
    // The mesh's control connections notice a death at once; the store's watch (a round
    // trip) is asked every kLivenessPoll.
    setup.check_peers_async = rendezvous_.check_peers;  // the store: safe from any thread
    setup.on_failure = [this](const Error& e) { poison(e.code(), e.message()); };
    setup.check_peers = [this, next = Clock::time_point{}]() mutable {
      if (mesh) mesh->check_alive();
      if (!rendezvous_.check_peers) return;
      const auto now = Clock::now();
      if (now < next) return;
      next = now + transport::kLivenessPoll;
      rendezvous_.check_peers();
    };
    device_backend = make_device_backend(setup);
    device_live.store(device_backend.get(), std::memory_order_release);
  }
  TANDEM_CHECK_ARG(device_backend->device() == device,
                   "communicator '{}' runs its device collectives on {} ({}); a call on {} needs "
                   "a communicator of its own (one device per rank and communicator, as in NCCL)",
                   rendezvous_.prefix, device_backend->device().str(), device_backend->name(),
                   device.str());
  return *device_backend;
}

void Runner::post(const std::shared_ptr<OpWork>& work, Completions& done) {
  const auto& c = work->op.call;
  if (failure.poisoned.load(std::memory_order_acquire)) {
    try {
      throw_poisoned(work->op);
    } catch (...) {
      finished(work, std::current_exception(), done);
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
                       config_.timeout().count());
  } else {
    work->request = c.kind == CollectiveKind::send
                        ? transport::Request::make_send(c.root, c.tag, c.in.data, c.in.bytes())
                        : transport::Request::make_recv(c.root, c.tag, c.out.data, c.out.bytes());
    try {
      // A receive from any rank is posted once a peer's message matches it (progress()).
      if (c.root != kAnySource) mesh->post(work->request);
      in_flight_.push_back(work);
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
  if (diag.trace) trace_op(*diag.trace, work->op, now, Clock::now(), what);
  const std::string message = fail(work->op, code, what);
  fail_in_flight(code, {}, done);
  finished(work, std::make_exception_ptr(Error(code, message, __FILE__, __LINE__)), done);
}

bool Runner::progress(Completions& done) {
  if (failure.poisoned.load(std::memory_order_acquire)) {
    fail_in_flight(ErrorCode::Internal, {}, done);
    return true;
  }
  // Unmatched receives from any rank are waited for too (never complete, never posted): a
  // peer that dies meanwhile fails them, as it fails every receive.
  std::vector<transport::Request*> requests;
  requests.reserve(in_flight_.size());
  for (const auto& w : in_flight_) requests.push_back(&w->request);
  try {
    match_any_source();
    mesh->test(requests);
  } catch (const Error& e) {
    fail_in_flight(e.code(), e.message(), done);
    return true;
  } catch (const std::exception& e) {
    fail_in_flight(
        ErrorCode::Internal,
        fmt::format("unexpected exception (a bug in tandem; please report it): {}", e.what()),
        done);
    return true;
  }
  bool completed = false;
  for (std::size_t i = 0; i < in_flight_.size();) {
    if (!in_flight_[i]->request.complete) {
      ++i;
      continue;
    }
    auto work = std::move(in_flight_[i]);
    in_flight_.erase(in_flight_.begin() + static_cast<std::ptrdiff_t>(i));
    diag.recorder.finish(work->ticket, true);
    if (diag.trace) trace_op(*diag.trace, work->op, work->posted_at, Clock::now());
    finished(std::move(work), nullptr, done);
    completed = true;
  }
  const auto now = Clock::now();
  const auto expired = std::find_if(in_flight_.begin(), in_flight_.end(),
                                    [&](const auto& w) { return now >= w->op.call.deadline; });
  if (expired != in_flight_.end()) {
    // The expired one goes first: it carries the cause, the others the poison.
    std::rotate(in_flight_.begin(), expired, expired + 1);
    const auto& r = in_flight_.front()->request;
    const std::string who =
        in_flight_.front()->unmatched()
            ? std::string("no rank sent a message it matches (same tag, count and dtype)")
            : fmt::format("rank {} never posted the matching {}", r.peer,
                          r.kind == transport::RequestKind::send ? "recv" : "send");
    fail_in_flight(ErrorCode::Timeout,
                   fmt::format("it did not complete before its deadline (timeout {} ms; {} of {} "
                               "bytes moved): {}",
                               config_.timeout().count(), r.done, r.bytes, who),
                   done);
    return true;
  }
  return completed;
}

void Runner::match_any_source() {
  for (const auto& w : in_flight_) {
    if (!w->unmatched()) continue;
    const int peer = mesh->probe(w->request.tag, any_source_from_);
    if (peer < 0) return;  // the later ones wait for this one
    w->request.peer = peer;
    mesh->post(w->request);
    any_source_from_ = (peer + 1) % id_.size;
  }
}

bool Runner::any_source_unmatched() const noexcept {
  return std::any_of(in_flight_.begin(), in_flight_.end(),
                     [](const auto& w) { return w->unmatched(); });
}

void Runner::fail_in_flight(ErrorCode code, std::string_view what, Completions& done) {
  if (in_flight_.empty()) return;
  std::vector<std::exception_ptr> errors(in_flight_.size());
  for (std::size_t i = 0; i < in_flight_.size(); ++i) {
    const auto& w = in_flight_[i];
    diag.recorder.finish(w->ticket, false);
    if (diag.trace)
      trace_op(*diag.trace, w->op, w->posted_at, Clock::now(),
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
  auto works = std::move(in_flight_);
  in_flight_.clear();
  for (std::size_t i = 0; i < works.size(); ++i)
    finished(std::move(works[i]), std::move(errors[i]), done);
}

void Runner::start(const std::shared_ptr<OpWork>& work, Completions& done) {
  // A send or receive of device memory is the device backend's (NCCL's), run as a collective
  // is; the mesh moves host memory only.
  if (is_p2p(work->op.call.kind) && work->op.device.is_cpu()) {
    post(work, done);
    return;
  }
  std::exception_ptr thrown;
  try {
    execute(work->op, work->op.call.seq);
  } catch (...) {
    thrown = std::current_exception();
  }
  // The mesh is poisoned now: posted sends/recvs cannot complete.
  if (thrown && !in_flight_.empty()) fail_in_flight(ErrorCode::Internal, {}, done);
  finished(work, std::move(thrown), done);
}

void Runner::finished(std::shared_ptr<OpWork> work, std::exception_ptr error, Completions& done) {
  if (diag.trace) work->set_completed_at(Clock::now());
  if (!error && work->op.call.kind == CollectiveKind::recv) work->set_source(work->request.peer);
  done.push_back({std::move(work), std::move(error)});
}

void Runner::close() noexcept {
  if (device_backend) {
    device_live.store(nullptr, std::memory_order_release);
    device_backend.reset();  // before the mesh: it may still ask it about the peers
  }
  if (mesh) mesh->close();
}

}  // namespace tandem::comm
