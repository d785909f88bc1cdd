// A backward pass on the timeline (TANDEM_TRACE). Lane 0 of the Reducer's ring holds the
// backward span with finalize_backward inside it; bucket b gets lane 1 + b, so buckets whose
// collectives overlap each other and backward each stay on a track of their own.

#include "ddp/reducer_impl.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>

namespace tandem::ddp {

void Reducer::Impl::trace_pass(Clock::time_point finalize_start,
                               const std::exception_ptr& failure) noexcept {
  const auto end = Clock::now();
  std::string error;
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const Error& e) {
      error = e.message();
    } catch (const std::exception& e) {
      error = e.what();
    } catch (...) {
      error = "unknown exception";
    }
  }
  try {
    for (; named_lanes <= buckets.size(); ++named_lanes) {
      trace->name_lane(static_cast<std::uint16_t>(named_lanes),
                       named_lanes == 0 ? std::string("ddp backward")
                                        : fmt::format("ddp bucket {}", named_lanes - 1));
    }
    auto& pass = trace->next();
    pass.label = "backward";
    pass.number = static_cast<std::int64_t>(sync_passes + local_passes);
    pass.category = "ddp";
    pass.start = pass_start;
    pass.end = end;
    pass.add_flag("sync", pass_sync);
    pass.add("parameters", static_cast<std::int64_t>(grads.size()));
    pass.add("buckets_started", static_cast<std::int64_t>(launches.size()));
    if (!error.empty()) trace->set_error(pass, error);
    trace->commit();

    auto& fin = trace->next();
    fin.label = "finalize_backward";
    fin.category = "ddp";
    fin.start = finalize_start;
    fin.end = end;
    trace->commit();

    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const Bucket& k = buckets[b];
      if (!k.launched) continue;
      // When the collective really ended: the communicator's completion time when it ran
      // there (a hook may return another kind of Work; then the end of the pass).
      Clock::time_point done = end;
      std::int64_t seq = -1;
      if (k.work) {
        const Clock::time_point at = k.work->completed_at();
        if (at != Clock::time_point{} && at <= end) done = at;
        seq = k.work->sequence();
      }
      auto& e = trace->next();
      e.label = "bucket";
      e.number = static_cast<std::int64_t>(b);
      e.category = "ddp";
      e.lane = static_cast<std::uint16_t>(1 + b);
      e.queued = k.ready_at;
      e.start = std::max(k.launched_at, k.ready_at);
      e.end = std::max(done, e.start);
      e.add("dtype", to_string(k.dtype));
      e.add("count", static_cast<std::int64_t>(k.count));
      e.add("bytes", static_cast<std::int64_t>(k.count * dtype_size(k.dtype)));
      e.add("parameters", static_cast<std::int64_t>(k.params.size()));
      if (seq >= 0) e.add("collective", seq);
      if (!error.empty()) trace->set_error(e, error);
      trace->commit();
    }
  } catch (...) {
    // Out of memory naming a track: the timeline misses this pass, training goes on.
  }
}

}  // namespace tandem::ddp
