#pragma once
// The state behind a Reducer, shared by reducer.cpp (the backward pass) and buckets.cpp
// (assignment, verification, the rebuild). Every member is guarded by `mutex`, except
// require_sync which may flip at any time and is read once per pass.

#include "core/trace.hpp"
#include "ddp/aligned_buffer.hpp"

#include <tandem/ddp.hpp>

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

namespace tandem::ddp {

/// A bucket's memory: host memory from the registered pool, or an allocation of
/// ReducerOptions::memory on its device.
struct BucketStorage {
  AlignedBuffer host;
  std::shared_ptr<void> device;
  void* data() const noexcept { return device ? device.get() : host.data(); }
};

struct Bucket {
  DataType dtype = DataType::f32;
  Device device = Device::cpu();
  std::vector<std::size_t> params;
  std::vector<std::size_t> offsets;  // element offset of each parameter's slot
  std::size_t count = 0;
  BucketStorage buffer;
  // ---- this pass ----
  std::size_t pending = 0;  // parameters not marked yet
  bool launched = false;
  std::shared_ptr<Work> work;
  /// Timeline only: when its last gradient came in, and when its collective was started.
  Clock::time_point ready_at{};
  Clock::time_point launched_at{};

  BufferView view() const noexcept { return {buffer.data(), count, dtype, device}; }
};

/// Per-parameter mark of the current pass.
enum class Mark : std::uint8_t { none, ready, unused };

struct Reducer::Impl {
  std::shared_ptr<Communicator> comm;
  ReducerOptions options;
  std::vector<BufferView> grads;  // where each gradient lives now (data may be null)
  std::vector<Bucket> buckets;
  std::vector<std::size_t> bucket_of;
  std::vector<std::size_t> slot_of;
  std::unique_ptr<CommHook> hook;
  /// Bucket memory of before the rebuild, kept until the next pass starts so that gradients
  /// the framework has not re-pointed yet stay readable for the optimizer step.
  std::vector<BucketStorage> retired;
  std::uint64_t generation = 0;
  bool rebuilt = false;

  mutable std::mutex mutex;
  std::atomic<bool> require_sync{true};

  // ---- the current pass ----
  bool started = false;
  bool pass_sync = true;
  std::vector<Mark> marks;
  std::size_t mark_count = 0;
  std::size_t next_launch = 0;
  std::vector<std::size_t> order;
  std::vector<LaunchRecord> launches;
  std::exception_ptr launch_error;

  // ---- across passes ----
  /// Marked in a no_sync pass since the last synchronised one: the gradient storage holds an
  /// accumulated sum that must be reduced even if the parameter is unused in the synced pass.
  std::vector<std::uint8_t> accumulated;
  std::uint64_t sync_passes = 0;
  std::uint64_t local_passes = 0;
  std::vector<LaunchRecord> last_launches;
  std::vector<std::size_t> last_order;

  // ---- timeline (TANDEM_TRACE; null when off) ----
  std::unique_ptr<core::trace::Ring> trace;
  Clock::time_point pass_start{};
  /// finalize_backward()'s waits for bucket collectives, summed (exposed_seconds()).
  std::atomic<double> exposed_seconds{0};
  std::size_t named_lanes = 0;

  // reducer.cpp
  /// Zeroed bucket memory of `bytes` on the gradients' device.
  BucketStorage allocate(std::size_t bytes) const;
  /// memcpy / memset on the host, options.memory's ordered copies on a device.
  void copy(void* dst, const void* src, std::size_t bytes) const;
  void zero(void* dst, std::size_t bytes) const;
  void start_pass();
  void reset_pass() noexcept;
  BufferView slot(std::size_t index) const noexcept;
  void mark_ready(std::size_t index);
  void mark_unused(std::size_t index);
  /// Counts a completed parameter against its bucket and starts every bucket that may start.
  void complete(std::size_t index);
  void launch_ready_buckets() noexcept;
  GradBucket grad_bucket(std::size_t b) const noexcept;
  /// Waits for every started bucket until `deadline`, ignoring failures; true when none is
  /// left running.
  bool quiesce(Deadline deadline) noexcept;
  void write_back();
  /// Records the pass on the timeline: the backward span, finalize_backward inside it, and
  /// each started bucket on its own track, from ready through launched to done.
  void trace_pass(Clock::time_point finalize_start, const std::exception_ptr& failure) noexcept;

  // buckets.cpp
  /// Lays out buckets (fresh zeroed memory) for an assignment and indexes the parameters.
  void build_buckets(const std::vector<std::vector<std::size_t>>& assignment);
  /// Collective: every rank's parameter list must equal rank 0's.
  void verify_across_ranks() const;
  /// TANDEM_DEBUG=DETAIL, after every synchronised pass: the ranks compare their pass count,
  /// bucket layout and a checksum of the averaged gradients (bitwise equal on every rank, or
  /// the replicas drift apart). Throws Error(Mismatch).
  void verify_pass() const;
  /// Collective: rank 0's ready order, broadcast, becomes the bucket order (once).
  void rebuild();
  /// "3 buckets: #0 f32 x 262144 (1.00 MiB) params [7, 6] ..."
  std::string describe_buckets() const;
};

}  // namespace tandem::ddp
