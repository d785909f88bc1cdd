// The executor as the API sees it: a blocking call and an asynchronous call both enter
// through the queue (exec/queue.hpp), which runs the first at once on the calling thread when
// nothing is ahead of it; what runs goes through the runner (exec/runner.hpp).

#include "comm/diag/validate.hpp"
#include "comm/impl.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>

#include <fmt/format.h>

namespace tandem {

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

void Communicator::Impl::run_blocking(comm::Op& op, std::span<const std::size_t> counts) {
  comm::Admission admitted = exec->admit(op, counts, comm::Start::now_if_free, config.timeout());
  if (admitted.runs_here()) {
    runner.execute(op, admitted.seq(), op.issued);  // just made: no clock read
    return;
  }
  const auto& work = admitted.work();
  if (!work->finished_by(op.call.deadline)) {
    // The deadline passed. The operation's buffers live in the caller's frame, so it must
    // not start after this returns: take it out of the queue if it is still there. If it
    // started, it runs under this same deadline and ends promptly.
    if (exec->withdraw(work)) {
      const std::string message =
          runner.fail(op, ErrorCode::Timeout,
                      fmt::format("it could not start before its deadline because earlier "
                                  "operations were still running (timeout {} ms)",
                                  config.timeout().count()),
                      false);
      TANDEM_THROW(ErrorCode::Timeout, "{}", message);
    }
    work->finished_by(Deadline::max());
  }
  work->wait(Deadline::max());  // finished: rethrows its error, if any
}

std::shared_ptr<Work> Communicator::Impl::submit(comm::Op& op,
                                                 std::span<const std::size_t> counts) {
  return exec->admit(op, counts, comm::Start::queued, config.timeout()).work();
}

void Communicator::Impl::shutdown() noexcept {
  if (runner.diag.monitor) runner.diag.monitor->stop();
  bool running = false;
  auto dropped = exec->close(running);
  if (running) {
    // Waiting for it could take until its deadline (minutes) if the peers never join.
    runner.poison(ErrorCode::Aborted,
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
  exec->join();
  runner.close();
  if (rendezvous.registered_lost && !runner.failure.poisoned.load(std::memory_order_acquire)) {
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
