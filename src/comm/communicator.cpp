// The API: every call is checked on the calling thread, given its algorithm, and handed to
// the executor (executor.cpp) blocking or asynchronously.

#include "comm/choice/policy.hpp"
#include "comm/diag/lost.hpp"
#include "comm/diag/validate.hpp"
#include "comm/impl.hpp"
#include "core/coarse_clock.hpp"
#include "core/fields.hpp"

#include <tandem/communicator.hpp>
#include <tandem/error.hpp>

#include <algorithm>
#include <mutex>
#include <string_view>
#include <vector>

namespace tandem {
namespace {

using Impl = Communicator::Impl;

// The last host call this thread checked: a loop that repeats one call (a training step's
// small allreduce, a benchmark) runs the operation built then again instead of checking and
// building it anew (validate(), the selector's lookup, the fingerprint's shape). Keyed by
// everything those depend on: the buffers as the caller passed them, and the kind, op and
// root `made` carries; calls with counts (allgatherv, whose counts may change in place) or
// options are always checked.
struct Checked {
  std::uint64_t serial = 0;  ///< Impl::serial; 0: nothing checked yet
  BufferView in;
  BufferView out;
  comm::Op made;  ///< what make_op() built for them, deadline aside
};
thread_local Checked last_checked;

bool same_view(const BufferView& a, const BufferView& b) noexcept {
  return a.data == b.data && a.count == b.count && a.dtype == b.dtype && a.device == b.device;
}

// Counts from the call's issue: the coarse clock (a few ns, where the precise one costs a
// tenth of an 8-byte allreduce over shared memory) is accurate enough for a deadline seconds
// away. A timeline needs the precise time: it shows when the call was issued.
void set_deadline(const Impl& impl, comm::Op& x, const CallOptions& o) noexcept {
  x.issued = impl.runner.diag.trace ? Clock::now() : core::coarse_now();
  const auto timeout = std::chrono::duration_cast<Clock::duration>(impl.config.timeout());
  auto& c = x.call;
  c.deadline = timeout >= Deadline::max() - x.issued ? Deadline::max() : x.issued + timeout;
  if (o.deadline && *o.deadline < c.deadline) c.deadline = *o.deadline;
}

// The memo reuses an operation built for an earlier call's options, so every field of
// CallOptions is either applied to it again on each call (deadline: set_deadline(); stream:
// repeated()) or makes the call one that is not memoised (algorithm: memoisable()). A field
// added to CallOptions fails this check until it has been given one of those places here.
static_assert(core::field_count<CallOptions>() == 3,
              "CallOptions changed: handle the new field in memoisable() or repeated(), then "
              "update this count");

bool memoisable(const Impl& impl, std::span<const std::size_t> counts,
                const CallOptions& o) noexcept {
  return counts.empty() && o.algorithm.empty() && impl.id.size > 1;
}

// This thread's memo of the same call, its deadline renewed in place (no copy on the latency
// path; only this thread's next call changes it), or null.
comm::Op* repeated(const Impl& impl, CollectiveKind kind, const BufferView& in,
                   const BufferView& out, ReduceOp op, int root,
                   std::span<const std::size_t> counts, const CallOptions& o) noexcept {
  if (!memoisable(impl, counts, o)) return nullptr;
  Checked& m = last_checked;
  const auto& mc = m.made.call;
  if (m.serial != impl.serial || mc.kind != kind || mc.op != op || mc.root != root ||
      !same_view(m.in, in) || !same_view(m.out, out))
    return nullptr;
  set_deadline(impl, m.made, o);
  m.made.call.stream = o.stream;
  return &m.made;
}

// The operation of a call not repeated: built, checked and memoised when it can be repeated.
comm::Op make_op(const Impl& impl, CollectiveKind kind, const BufferView& in, const BufferView& out,
                 ReduceOp op, int root, std::span<const std::size_t> counts, const CallOptions& o) {
  comm::Op x;
  auto& c = x.call;
  c.kind = kind;
  c.in = in;
  c.out = out;
  c.op = op;
  c.root = root;
  c.counts = counts;
  c.hosts = &impl.config.hosts;
  c.stream = o.stream;
  set_deadline(impl, x, o);
  comm::validate(c, impl.id.rank, impl.id.size);
  // What a rank does not use is normalised, so algorithms see one shape: a broadcast's
  // input matters on the root only.
  if (kind == CollectiveKind::broadcast && impl.id.rank != root) c.in = c.out;
  x.shape_dtype = comm::shape_dtype(c);
  x.shape_count = comm::shape_count(c);
  x.shape_print = algorithms::fingerprint_shape(kind, x.shape_dtype, x.shape_count, root);
  // Buffers on a device go to the device backend (validate() checked that both are on one).
  x.device = c.in.device.is_cpu() ? c.out.device : c.in.device;
  if (!x.device.is_cpu()) {
    TANDEM_CHECK_ARG(!is_bitwise(op),
                     "{}: ReduceOp::{} of buffers on {}: the device backends have no bitwise "
                     "reductions (NCCL has none); reduce a copy in host memory",
                     to_string(kind), to_string(op), x.device.str());
    return x;
  }
  if (impl.id.size == 1) {
    if (!o.algorithm.empty() && algorithms::Registry::builtin().find(kind, o.algorithm) == nullptr)
      impl.config.policy.choose(algorithms::Registry::builtin(), c, 1, o.algorithm);  // throws
    return x;
  }
  x.algorithm =
      &impl.config.policy.choose(algorithms::Registry::builtin(), c, impl.id.size, o.algorithm);
  if (memoisable(impl, counts, o)) last_checked = {impl.serial, in, out, x};
  return x;
}

// A call that is not its thread's last one again, in a frame of its own: the repeated
// call's frame holds no operation (zeroing one cost the latency path 24 stores).
[[gnu::noinline]] void run_new(Impl& impl, CollectiveKind kind, const BufferView& in,
                               const BufferView& out, ReduceOp op, int root,
                               std::span<const std::size_t> counts, const CallOptions& o,
                               std::uint32_t tag) {
  comm::Op x = make_op(impl, kind, in, out, op, root, counts, o);
  x.user_tag = tag;
  impl.run_blocking(x, counts);
}

// `tag`: send/recv's, which the memo does not key (it is part of no check).
void run(Impl& impl, CollectiveKind kind, const BufferView& in, const BufferView& out, ReduceOp op,
         int root, std::span<const std::size_t> counts, const CallOptions& o,
         std::uint32_t tag = 0) {
  if (comm::Op* x = repeated(impl, kind, in, out, op, root, counts, o)) {
    x->user_tag = tag;
    impl.run_blocking(*x, counts);
  } else {
    run_new(impl, kind, in, out, op, root, counts, o, tag);
  }
}

std::shared_ptr<Work> submit(Impl& impl, CollectiveKind kind, const BufferView& in,
                             const BufferView& out, ReduceOp op, int root,
                             std::span<const std::size_t> counts, const CallOptions& o,
                             std::uint32_t tag = 0) {
  if (comm::Op* x = repeated(impl, kind, in, out, op, root, counts, o)) {
    x->user_tag = tag;
    return impl.submit(*x, counts);
  }
  comm::Op x = make_op(impl, kind, in, out, op, root, counts, o);
  x.user_tag = tag;
  return impl.submit(x, counts);
}

}  // namespace

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Communicator::~Communicator() {
  if (impl_) impl_->shutdown();
}

int Communicator::rank() const noexcept {
  return impl_->id.rank;
}
int Communicator::size() const noexcept {
  return impl_->id.size;
}
int Communicator::local_rank() const noexcept {
  return impl_->id.local_rank;
}
int Communicator::local_size() const noexcept {
  return impl_->id.local_size;
}

// ---- allreduce ---------------------------------------------------------------------------
void Communicator::allreduce(BufferView buf, ReduceOp op, const CallOptions& o) {
  run(*impl_, CollectiveKind::allreduce, buf, buf, op, 0, {}, o);
}
void Communicator::allreduce(BufferView in, BufferView out, ReduceOp op, const CallOptions& o) {
  run(*impl_, CollectiveKind::allreduce, in, out, op, 0, {}, o);
}
std::shared_ptr<Work> Communicator::allreduce_async(BufferView in, BufferView out, ReduceOp op,
                                                    const CallOptions& o) {
  return submit(*impl_, CollectiveKind::allreduce, in, out, op, 0, {}, o);
}

// ---- broadcast ---------------------------------------------------------------------------
void Communicator::broadcast(BufferView buf, int root, const CallOptions& o) {
  run(*impl_, CollectiveKind::broadcast, buf, buf, ReduceOp::sum, root, {}, o);
}
void Communicator::broadcast(BufferView in, BufferView out, int root, const CallOptions& o) {
  run(*impl_, CollectiveKind::broadcast, in, out, ReduceOp::sum, root, {}, o);
}
std::shared_ptr<Work> Communicator::broadcast_async(BufferView in, BufferView out, int root,
                                                    const CallOptions& o) {
  return submit(*impl_, CollectiveKind::broadcast, in, out, ReduceOp::sum, root, {}, o);
}

// ---- reduce ------------------------------------------------------------------------------
void Communicator::reduce(BufferView in, BufferView out, ReduceOp op, int root,
                          const CallOptions& o) {
  run(*impl_, CollectiveKind::reduce, in, out, op, root, {}, o);
}
std::shared_ptr<Work> Communicator::reduce_async(BufferView in, BufferView out, ReduceOp op,
                                                 int root, const CallOptions& o) {
  return submit(*impl_, CollectiveKind::reduce, in, out, op, root, {}, o);
}

// ---- allgather / allgatherv ----------------------------------------------------------------
void Communicator::allgather(BufferView in, BufferView out, const CallOptions& o) {
  run(*impl_, CollectiveKind::allgather, in, out, ReduceOp::sum, 0, {}, o);
}
std::shared_ptr<Work> Communicator::allgather_async(BufferView in, BufferView out,
                                                    const CallOptions& o) {
  return submit(*impl_, CollectiveKind::allgather, in, out, ReduceOp::sum, 0, {}, o);
}
void Communicator::allgatherv(BufferView in, BufferView out, std::span<const std::size_t> counts,
                              const CallOptions& o) {
  run(*impl_, CollectiveKind::allgatherv, in, out, ReduceOp::sum, 0, counts, o);
}
std::shared_ptr<Work> Communicator::allgatherv_async(BufferView in, BufferView out,
                                                     std::span<const std::size_t> counts,
                                                     const CallOptions& o) {
  return submit(*impl_, CollectiveKind::allgatherv, in, out, ReduceOp::sum, 0, counts, o);
}

// ---- reduce_scatter / alltoall -----------------------------------------------------------
void Communicator::reduce_scatter(BufferView in, BufferView out, ReduceOp op,
                                  const CallOptions& o) {
  run(*impl_, CollectiveKind::reduce_scatter, in, out, op, 0, {}, o);
}
std::shared_ptr<Work> Communicator::reduce_scatter_async(BufferView in, BufferView out, ReduceOp op,
                                                         const CallOptions& o) {
  return submit(*impl_, CollectiveKind::reduce_scatter, in, out, op, 0, {}, o);
}
void Communicator::alltoall(BufferView in, BufferView out, const CallOptions& o) {
  run(*impl_, CollectiveKind::alltoall, in, out, ReduceOp::sum, 0, {}, o);
}
std::shared_ptr<Work> Communicator::alltoall_async(BufferView in, BufferView out,
                                                   const CallOptions& o) {
  return submit(*impl_, CollectiveKind::alltoall, in, out, ReduceOp::sum, 0, {}, o);
}

// ---- gather / scatter --------------------------------------------------------------------
void Communicator::gather(BufferView in, BufferView out, int root, const CallOptions& o) {
  run(*impl_, CollectiveKind::gather, in, out, ReduceOp::sum, root, {}, o);
}
std::shared_ptr<Work> Communicator::gather_async(BufferView in, BufferView out, int root,
                                                 const CallOptions& o) {
  return submit(*impl_, CollectiveKind::gather, in, out, ReduceOp::sum, root, {}, o);
}
void Communicator::scatter(BufferView in, BufferView out, int root, const CallOptions& o) {
  run(*impl_, CollectiveKind::scatter, in, out, ReduceOp::sum, root, {}, o);
}
std::shared_ptr<Work> Communicator::scatter_async(BufferView in, BufferView out, int root,
                                                  const CallOptions& o) {
  return submit(*impl_, CollectiveKind::scatter, in, out, ReduceOp::sum, root, {}, o);
}

// ---- point to point ------------------------------------------------------------------------
void Communicator::send(BufferView buf, int peer, std::uint32_t tag, const CallOptions& o) {
  run(*impl_, CollectiveKind::send, buf, buf, ReduceOp::sum, peer, {}, o, tag);
}
int Communicator::recv(BufferView buf, int peer, std::uint32_t tag, const CallOptions& o) {
  if (peer == kAnySource) {
    // Only the worker matches it to a sender (its receives wait in flight until one does).
    const auto work = recv_async(buf, peer, tag, o);
    work->wait(Deadline::max());  // the receive fails at its own deadline
    return work->source();
  }
  run(*impl_, CollectiveKind::recv, buf, buf, ReduceOp::sum, peer, {}, o, tag);
  return peer;
}
std::shared_ptr<Work> Communicator::send_async(BufferView buf, int peer, std::uint32_t tag,
                                               const CallOptions& o) {
  return submit(*impl_, CollectiveKind::send, buf, buf, ReduceOp::sum, peer, {}, o, tag);
}
std::shared_ptr<Work> Communicator::recv_async(BufferView buf, int peer, std::uint32_t tag,
                                               const CallOptions& o) {
  return submit(*impl_, CollectiveKind::recv, buf, buf, ReduceOp::sum, peer, {}, o, tag);
}

// ---- barrier -------------------------------------------------------------------------------
void Communicator::barrier(const CallOptions& o) {
  run(*impl_, CollectiveKind::barrier, {}, {}, ReduceOp::sum, 0, {}, o);
}
std::shared_ptr<Work> Communicator::barrier_async(const CallOptions& o) {
  return submit(*impl_, CollectiveKind::barrier, {}, {}, ReduceOp::sum, 0, {}, o);
}

// ---- state ---------------------------------------------------------------------------------
void Communicator::abort(std::string_view reason) {
  impl_->runner.poison(ErrorCode::Aborted,
                       fmt::format("communicator aborted by rank {}: {}", impl_->id.rank, reason));
}

bool Communicator::poisoned() const noexcept {
  return impl_->runner.failure.poisoned.load(std::memory_order_acquire);
}

std::vector<int> Communicator::lost_ranks() const {
  const comm::Failure& f = impl_->runner.failure;
  if (!f.poisoned.load(std::memory_order_acquire)) return {};
  std::string message;
  {
    std::lock_guard lock(f.mutex);
    if (f.code != ErrorCode::PeerLost) return {};
    message = f.message;
  }
  return comm::ranks_named_lost(message, impl_->id.size);
}

std::exception_ptr Communicator::error() const {
  std::lock_guard guard(impl_->runner.failure.mutex);
  return impl_->runner.failure.error;
}

std::string_view Communicator::transport_to(int peer) const {
  TANDEM_CHECK_ARG(peer >= 0 && peer < impl_->id.size,
                   "transport_to: peer {} is out of range [0, {})", peer, impl_->id.size);
  if (peer == impl_->id.rank || !impl_->runner.mesh) return "self";
  return transport::to_string(impl_->runner.mesh->link(peer));
}

std::string_view Communicator::algorithm_for(CollectiveKind kind, std::size_t bytes) const {
  if (impl_->id.size == 1) return "local";
  return impl_->config.policy
      .choose(algorithms::Registry::builtin(),
              comm::probe_call(kind, bytes, impl_->id.size, &impl_->config.hosts), impl_->id.size,
              {})
      .name();
}

std::string_view Communicator::last_algorithm() const noexcept {
  if (impl_->runner.diag.last_on_device.load(std::memory_order_acquire)) {
    const comm::DeviceBackend* device = impl_->runner.device_live.load(std::memory_order_acquire);
    return device != nullptr ? device->name() : std::string_view("device");
  }
  if (impl_->id.size == 1) return "local";
  const algorithms::Algorithm* a =
      impl_->runner.diag.last_algorithm.load(std::memory_order_acquire);
  return a != nullptr ? a->name() : std::string_view();
}

std::chrono::milliseconds Communicator::timeout() const noexcept {
  return impl_->config.timeout();
}

void Communicator::set_timeout(std::chrono::milliseconds timeout) {
  TANDEM_CHECK_ARG(timeout.count() > 0, "set_timeout: {} ms is not a timeout; give a positive one",
                   timeout.count());
  impl_->config.set_timeout(timeout);
}

SharedTimeout Communicator::shared_timeout() const noexcept {
  return impl_->config.shared_timeout();
}

const std::shared_ptr<store::Store>& Communicator::store() const noexcept {
  return impl_->rendezvous.base_store;
}

}  // namespace tandem
