// The backward pass of the Reducer: marks, bucket launches in bucket order, finalize.

#include "ddp/reducer_impl.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>

#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

namespace tandem::ddp {

namespace {

void check_gradient(const BufferView& registered, const BufferView& g, std::size_t index) {
  TANDEM_CHECK_ARG(g.dtype == registered.dtype && g.count == registered.count,
                   "Reducer: gradient of parameter {} is {} x {} but it was registered as {} x "
                   "{}: a parameter's dtype and size cannot change",
                   index, to_string(g.dtype), g.count, to_string(registered.dtype),
                   registered.count);
  TANDEM_CHECK_ARG(g.device == registered.device,
                   "Reducer: gradient of parameter {} is on {} but it was registered on {}: a "
                   "gradient cannot change device (the buckets stay where they were made)",
                   index, g.device.str(), registered.device.str());
  TANDEM_CHECK_ARG(g.data != nullptr || g.count == 0,
                   "Reducer: gradient of parameter {} has null data but {} elements", index,
                   g.count);
}

std::string list_indices(const std::vector<std::size_t>& v, std::size_t max = 16) {
  if (v.size() <= max) return fmt::format("{}", fmt::join(v, ", "));
  return fmt::format("{}, ... ({} in all)",
                     fmt::join(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(max), ", "),
                     v.size());
}

}  // namespace

// ---- construction ----------------------------------------------------------------------------

Reducer::Reducer(std::shared_ptr<Communicator> comm, std::vector<BufferView> gradients,
                 ReducerOptions options)
    : impl_(std::make_unique<Impl>()) {
  TANDEM_CHECK_ARG(comm != nullptr, "Reducer: no communicator");
  Impl& s = *impl_;
  s.comm = std::move(comm);
  s.options = options;
  const Device device = s.options.memory ? s.options.memory->device() : Device::cpu();
  for (std::size_t i = 0; i < gradients.size(); ++i) {
    const BufferView& g = gradients[i];
    TANDEM_CHECK_ARG(g.device == device,
                     "Reducer: gradient of parameter {} is on {} but the buckets are on {}; {}", i,
                     g.device.str(), device.str(),
                     s.options.memory ? "every gradient must be on the BucketMemory's device"
                                      : "give ReducerOptions::memory for device gradients");
    s.grads.push_back(g);
  }
  s.hook = allreduce_hook();
  if (auto* sink = core::trace::Sink::get())
    s.trace = sink->open(std::max(sink->rank(), 0), "ddp backward");
  if (s.options.verify_parameters) s.verify_across_ranks();

  std::vector<std::size_t> reverse(s.grads.size());
  for (std::size_t i = 0; i < reverse.size(); ++i) reverse[i] = reverse.size() - 1 - i;
  s.build_buckets(compute_bucket_assignment_by_size(s.grads, reverse, s.options.first_bucket_bytes,
                                                    s.options.bucket_cap_bytes));
  if (s.options.gradient_as_bucket_view) {
    for (std::size_t i = 0; i < s.grads.size(); ++i) {
      const BufferView slot = s.slot(i);
      if (s.grads[i].data != nullptr && s.grads[i].count > 0)
        s.copy(slot.data, s.grads[i].data, slot.bytes());
      s.grads[i] = slot;
    }
  }
  s.marks.assign(s.grads.size(), Mark::none);
  s.accumulated.assign(s.grads.size(), 0);
  s.reset_pass();
  TANDEM_INFO(ddp, "Reducer over {} parameters{}{}: {}", s.grads.size(),
              s.options.gradient_as_bucket_view ? ", gradients as bucket views" : "",
              s.options.find_unused_parameters ? ", finding unused parameters" : "",
              s.describe_buckets());
}

Reducer::~Reducer() {
  if (!impl_) return;
  Impl& s = *impl_;
  std::lock_guard lock(s.mutex);
  if (s.quiesce(deadline_in(s.comm->timeout()))) return;
  // A collective still writes into bucket memory that is about to be freed: stop it.
  TANDEM_WARN(ddp,
              "Reducer destroyed while a bucket allreduce was still running after {} s; "
              "aborting the communicator",
              std::chrono::duration<double>(s.comm->timeout()).count());
  s.comm->abort("a DDP Reducer was destroyed while its bucket allreduce was still running");
  s.quiesce(deadline_in(std::chrono::seconds(30)));
}

std::size_t Reducer::num_parameters() const noexcept {
  return impl_->grads.size();
}
const ReducerOptions& Reducer::options() const noexcept {
  return impl_->options;
}
Communicator& Reducer::communicator() const noexcept {
  return *impl_->comm;
}

BufferView Reducer::bucket_view(std::size_t index) const {
  std::lock_guard lock(impl_->mutex);
  TANDEM_CHECK_ARG(index < impl_->grads.size(), "Reducer::bucket_view: no parameter {} (of {})",
                   index, impl_->grads.size());
  return impl_->slot(index);
}

std::uint64_t Reducer::bucket_generation() const noexcept {
  std::lock_guard lock(impl_->mutex);
  return impl_->generation;
}

void Reducer::set_gradient(std::size_t index, BufferView gradient) {
  std::lock_guard lock(impl_->mutex);
  TANDEM_CHECK_ARG(index < impl_->grads.size(), "Reducer::set_gradient: no parameter {} (of {})",
                   index, impl_->grads.size());
  check_gradient(impl_->grads[index], gradient, index);
  impl_->grads[index] = gradient;
}

void Reducer::set_require_sync(bool sync) noexcept {
  impl_->require_sync.store(sync);
}
bool Reducer::require_sync() const noexcept {
  return impl_->require_sync.load();
}

void Reducer::register_comm_hook(std::unique_ptr<CommHook> hook) {
  TANDEM_CHECK_ARG(hook != nullptr, "Reducer::register_comm_hook: null hook");
  std::lock_guard lock(impl_->mutex);
  TANDEM_CHECK_ARG(!impl_->started,
                   "Reducer::register_comm_hook: called during a backward pass; register the "
                   "hook before the first backward or between passes");
  impl_->hook = std::move(hook);
}

ReducerStats Reducer::stats() const {
  std::lock_guard lock(impl_->mutex);
  const Impl& s = *impl_;
  ReducerStats st;
  for (const Bucket& b : s.buckets)
    st.buckets.push_back({b.dtype, b.count, b.count * dtype_size(b.dtype), b.params, b.offsets});
  st.rebuilt = s.rebuilt;
  st.bucket_generation = s.generation;
  st.sync_passes = s.sync_passes;
  st.local_passes = s.local_passes;
  st.launches = s.last_launches;
  st.ready_order = s.last_order;
  st.hook = std::string(s.hook->name());
  return st;
}

// ---- the pass ---------------------------------------------------------------------------------

BufferView Reducer::Impl::slot(std::size_t index) const noexcept {
  const Bucket& b = buckets[bucket_of[index]];
  return b.view().slice(b.offsets[slot_of[index]], grads[index].count);
}

BucketStorage Reducer::Impl::allocate(std::size_t bytes) const {
  BucketStorage out;
  if (options.memory) {
    out.device = options.memory->allocate(bytes);
    TANDEM_CHECK(out.device != nullptr || bytes == 0,
                 "BucketMemory on {} returned no memory for a bucket of {} bytes",
                 options.memory->device().str(), bytes);
  } else {
    out.host = AlignedBuffer(bytes, *comm);
  }
  return out;
}

void Reducer::Impl::copy(void* dst, const void* src, std::size_t bytes) const {
  if (options.memory) {
    options.memory->copy(dst, src, bytes);
  } else {
    std::memcpy(dst, src, bytes);
  }
}

void Reducer::Impl::zero(void* dst, std::size_t bytes) const {
  if (options.memory) {
    options.memory->zero(dst, bytes);
  } else {
    std::memset(dst, 0, bytes);
  }
}

void Reducer::Impl::start_pass() {
  if (started) return;
  started = true;
  pass_sync = require_sync.load();
  if (trace) pass_start = Clock::now();
  retired.clear();
}

void Reducer::Impl::reset_pass() noexcept {
  started = false;
  std::fill(marks.begin(), marks.end(), Mark::none);
  mark_count = 0;
  next_launch = 0;
  order.clear();
  launches.clear();
  launch_error = nullptr;
  for (Bucket& b : buckets) {
    b.pending = b.params.size();
    b.launched = false;
    b.work.reset();
  }
}

GradBucket Reducer::Impl::grad_bucket(std::size_t b) const noexcept {
  const Bucket& k = buckets[b];
  return {b,
          k.view(),
          k.params,
          k.offsets,
          comm.get(),
          b + 1 == buckets.size(),
          options.memory ? options.memory->stream() : nullptr};
}

void Reducer::Impl::launch_ready_buckets() noexcept {
  while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
    const std::size_t b = next_launch++;
    Bucket& k = buckets[b];
    k.launched = true;
    if (trace) k.launched_at = Clock::now();
    launches.push_back({b, mark_count});
    try {
      k.work = hook->start(grad_bucket(b));
      TANDEM_CHECK(k.work != nullptr, "comm hook {} returned no Work for bucket {}", hook->name(),
                   b);
    } catch (...) {
      if (!launch_error) launch_error = std::current_exception();
    }
  }
}

void Reducer::Impl::complete(std::size_t index) {
  Bucket& k = buckets[bucket_of[index]];
  if (--k.pending == 0) {
    if (trace) k.ready_at = Clock::now();
    launch_ready_buckets();
  }
}

void Reducer::Impl::mark_ready(std::size_t index) {
  ++mark_count;
  marks[index] = Mark::ready;
  if (!pass_sync) {
    accumulated[index] = 1;
    return;
  }
  order.push_back(index);
  const BufferView g = grads[index];
  const BufferView dst = slot(index);
  if (g.data != dst.data && g.count > 0) copy(dst.data, g.data, dst.bytes());
  const bool had_error = launch_error != nullptr;
  complete(index);
  if (!had_error && launch_error) std::rethrow_exception(launch_error);
}

void Reducer::Impl::mark_unused(std::size_t index) {
  marks[index] = Mark::unused;
  if (!pass_sync) return;
  const BufferView g = grads[index];
  const BufferView dst = slot(index);
  if (accumulated[index] && g.data != nullptr) {
    // Gradients accumulated under no_sync still count although this pass added nothing.
    if (g.data != dst.data && g.count > 0) copy(dst.data, g.data, dst.bytes());
  } else if (dst.count > 0) {
    zero(dst.data, dst.bytes());
  }
  complete(index);
}

bool Reducer::Impl::quiesce(Deadline deadline) noexcept {
  bool all_done = true;
  for (Bucket& b : buckets) {
    if (!b.work) continue;
    try {
      b.work->wait(deadline);
    } catch (...) {
    }
    all_done = all_done && b.work->test();
  }
  return all_done;
}

void Reducer::Impl::write_back() {
  for (std::size_t i = 0; i < grads.size(); ++i) {
    const BufferView g = grads[i];
    const BufferView src = slot(i);
    if (g.data != nullptr && g.data != src.data && g.count > 0) copy(g.data, src.data, src.bytes());
  }
}

void Reducer::prepare_for_backward(std::span<const std::size_t> unused) {
  std::lock_guard lock(impl_->mutex);
  Impl& s = *impl_;
  TANDEM_CHECK_ARG(s.mark_count == 0,
                   "Reducer::prepare_for_backward: {} parameters were marked ready since the last "
                   "finalize_backward(): call prepare_for_backward before backward starts, and "
                   "finalize_backward() after every backward pass (also one that failed) before "
                   "starting the next",
                   s.mark_count);
  TANDEM_CHECK_ARG(unused.empty() || s.options.find_unused_parameters,
                   "Reducer::prepare_for_backward: {} parameters declared unused but the Reducer "
                   "was made without find_unused_parameters; construct it with "
                   "ReducerOptions::find_unused_parameters = true",
                   unused.size());
  for (std::size_t i : unused)
    TANDEM_CHECK_ARG(i < s.grads.size(), "Reducer::prepare_for_backward: no parameter {} (of {})",
                     i, s.grads.size());
  s.start_pass();
  for (std::size_t i : unused) {
    if (s.marks[i] != Mark::none) continue;  // listed twice: once is enough
    s.mark_unused(i);
  }
  if (s.launch_error) std::rethrow_exception(s.launch_error);
}

void Reducer::mark_variable_ready(std::size_t index) {
  std::lock_guard lock(impl_->mutex);
  Impl& s = *impl_;
  TANDEM_CHECK_ARG(index < s.grads.size(),
                   "Reducer::mark_variable_ready: no parameter {} (the Reducer has {})", index,
                   s.grads.size());
  s.start_pass();
  if (s.marks[index] == Mark::ready)
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "Reducer: parameter {} marked ready twice in one backward pass: is it used twice "
                 "in the graph (shared weights, reentrant checkpointing)? Mark each parameter "
                 "once per pass, when its gradient is complete, and call finalize_backward() "
                 "after every pass",
                 index);
  if (s.marks[index] == Mark::unused)
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "Reducer: parameter {} got a gradient although prepare_for_backward() declared "
                 "it unused in this pass",
                 index);
  TANDEM_CHECK_ARG(!s.pass_sync || s.grads[index].data != nullptr || s.grads[index].count == 0,
                   "Reducer: parameter {} has no gradient storage; pass it with set_gradient() "
                   "or mark_variable_ready(index, gradient)",
                   index);
  s.mark_ready(index);
}

void Reducer::mark_variable_ready(std::size_t index, BufferView gradient) {
  set_gradient(index, gradient);
  mark_variable_ready(index);
}

double Reducer::exposed_seconds() const noexcept {
  return impl_->exposed_seconds.load(std::memory_order_relaxed);
}

void Reducer::finalize_backward() {
  std::lock_guard lock(impl_->mutex);
  Impl& s = *impl_;
  s.start_pass();
  struct ResetPass {
    Impl& s;
    ~ResetPass() { s.reset_pass(); }
  } reset{s};
  // Before the reset: the pass on the timeline, also when it fails.
  struct TracePass {
    Impl& s;
    Clock::time_point start;
    std::exception_ptr failure;
    bool done = false;
    ~TracePass() {
      if (s.trace && !done)
        s.trace_pass(start, failure ? failure
                                    : std::make_exception_ptr(
                                          Error(ErrorCode::InvalidArgument,
                                                "finalize_backward failed (see what it threw)")));
    }
  } trace{s, s.trace ? Clock::now() : Clock::time_point{}, nullptr};
  if (!s.pass_sync) {
    ++s.local_passes;
    trace.done = true;
    if (s.trace) s.trace_pass(trace.start, nullptr);
    return;
  }

  std::vector<std::size_t> missing;
  for (std::size_t i = 0; i < s.marks.size(); ++i)
    if (s.marks[i] == Mark::none) missing.push_back(i);
  if (!missing.empty()) {
    if (s.options.find_unused_parameters) {
      for (std::size_t i : missing) s.mark_unused(i);
    } else {
      // Let what was started finish (every rank started the same prefix of buckets when all
      // of them miss the same parameters) before the memory can go away.
      s.quiesce(deadline_in(s.comm->timeout()));
      std::vector<std::size_t> stuck;
      stuck.reserve(missing.size());
      for (std::size_t i : missing) stuck.push_back(s.bucket_of[i]);
      std::sort(stuck.begin(), stuck.end());
      stuck.erase(std::unique(stuck.begin(), stuck.end()), stuck.end());
      TANDEM_THROW(ErrorCode::InvalidArgument,
                   "Reducer: {} of {} parameters never became ready in this backward pass "
                   "(parameters {}; buckets {} never started): they received no gradient. Pass "
                   "find_unused_parameters=true if this is expected (parameters unused in "
                   "forward), and make sure every rank runs the same backward passes",
                   missing.size(), s.grads.size(), list_indices(missing), list_indices(stuck));
    }
  }
  TANDEM_CHECK(s.next_launch == s.buckets.size() || s.launch_error,
               "{} of {} buckets started after every parameter was ready", s.next_launch,
               s.buckets.size());

  const Deadline deadline = deadline_in(s.comm->timeout());
  std::exception_ptr failure = s.launch_error;
  struct Exposed {  // the wait below, failed or not
    Impl& s;
    Clock::time_point start = Clock::now();
    ~Exposed() {
      s.exposed_seconds.store(s.exposed_seconds.load(std::memory_order_relaxed) +
                                  std::chrono::duration<double>(Clock::now() - start).count(),
                              std::memory_order_relaxed);
    }
  } exposed{s};
  for (std::size_t b = 0; b < s.buckets.size(); ++b) {
    Bucket& k = s.buckets[b];
    if (!k.work) continue;
    try {
      k.work->wait(deadline);
      if (!failure) s.hook->finish(s.grad_bucket(b));
    } catch (const Error& e) {
      if (!failure)
        failure = std::make_exception_ptr(
            Error(e.code(),
                  fmt::format("DDP bucket {} of {} ({} x {}, parameters {}) failed: {}", b,
                              s.buckets.size(), to_string(k.dtype), k.count, list_indices(k.params),
                              e.message()),
                  __FILE__, __LINE__));
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
  }
  trace.failure = failure;
  if (failure) std::rethrow_exception(failure);
  if (log::enabled(log::Level::detail, log::Subsys::ddp)) s.verify_pass();

  s.write_back();
  std::fill(s.accumulated.begin(), s.accumulated.end(), std::uint8_t{0});
  trace.done = true;
  if (s.trace) s.trace_pass(trace.start, nullptr);
  ++s.sync_passes;
  s.last_launches = s.launches;
  s.last_order = s.order;
  if (s.options.rebuild_buckets && !s.rebuilt) s.rebuild();
}

}  // namespace tandem::ddp
