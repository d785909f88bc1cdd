#pragma once
/// @file ddp.hpp
/// The Reducer of distributed data-parallel training, independent of any tensor library.
///
/// It knows parameters only as (index, gradient BufferView) and speaks the vocabulary of
/// PyTorch's c10d Reducer. A framework binding (tandem_torch, or your own) does four things:
///  1. constructs a Reducer with the gradient storage of every parameter, in registration
///     order (parameter i of the model is index i);
///  2. calls mark_variable_ready(i) when parameter i's gradient for this backward pass is
///     complete (from the framework's gradient-accumulation hook);
///  3. calls finalize_backward() at the end of every backward pass;
///  4. steps the optimizer: the gradients now hold the average over all ranks.
///
/// Gradients are grouped in buckets, in reverse registration order (the last layers'
/// gradients are ready first), one dtype per bucket; the first bucket holds up to
/// ReducerOptions::first_bucket_bytes (1 MiB), later ones bucket_cap_bytes (25 MiB). Each
/// bucket owns one contiguous 64-byte-aligned buffer. As soon as every gradient of a bucket is
/// marked ready its allreduce starts asynchronously, so communication overlaps the rest of
/// backward; buckets start strictly in bucket order (every rank must issue the same
/// collectives in the same order). After the first synchronised backward pass the buckets are
/// rebuilt, once, in the order in which gradients became ready on rank 0 (broadcast, so every
/// rank gets the same buckets).
///
/// Every rank must construct its Reducer over the same parameters (count, dtypes and sizes,
/// checked at construction) and run the same sequence of synchronised backward passes.

#include <tandem/communicator.hpp>
#include <tandem/types.hpp>
#include <tandem/work.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem::ddp {

/// Where a Reducer's buckets live and how gradient bytes move in and out of them. Without one
/// (ReducerOptions::memory empty) buckets are host memory from the communicator's registered
/// pool and bytes move with memcpy. A framework whose gradients live on a device supplies one
/// (tandem_torch does for CUDA parameters): buckets are then allocated by it on device(), every
/// copy is ordered on the framework's current stream of the calling thread, and each bucket's
/// collective starts behind the stream its gradients were copied on (GradBucket::stream), so
/// that the host never waits for the device during backward.
class BucketMemory {
 public:
  virtual ~BucketMemory() = default;
  /// The device of every gradient and bucket.
  virtual Device device() const noexcept = 0;
  /// `bytes` zeroed bytes on device(), valid while the returned handle lives.
  virtual std::shared_ptr<void> allocate(std::size_t bytes) = 0;
  /// Copies `bytes` from `src` to `dst` (both on device()), ordered on the current stream.
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  /// Zeroes `bytes` at `dst`, ordered on the current stream.
  virtual void zero(void* dst, std::size_t bytes) = 0;
  /// Copies `bytes` at `src` to host memory and waits for them (diagnostics only).
  virtual void read(void* host, const void* src, std::size_t bytes) = 0;
  /// The framework's current stream on the calling thread, as CallOptions::stream takes it.
  virtual void* stream() = 0;
};

/// Options of a Reducer, with PyTorch DistributedDataParallel's defaults.
struct ReducerOptions {
  /// Cap of the first bucket in bytes (PyTorch: dist._DEFAULT_FIRST_BUCKET_BYTES). A small
  /// first bucket starts communication early in backward.
  std::size_t first_bucket_bytes = std::size_t{1} << 20;
  /// Cap of every later bucket in bytes (PyTorch: bucket_cap_mb = 25). A bucket closes once
  /// it reaches its cap, so one parameter larger than the cap gets a bucket of its own.
  std::size_t bucket_cap_bytes = std::size_t{25} << 20;
  /// Parameters that get no gradient in a backward pass are reduced as zeros (see
  /// prepare_for_backward and finalize_backward) instead of making finalize_backward fail.
  bool find_unused_parameters = false;
  /// The framework stores each gradient directly in its bucket slot (bucket_view(i)), which
  /// saves a copy in and out of the bucket per step and the memory of one gradient copy.
  bool gradient_as_bucket_view = false;
  /// Rebuild the buckets once, after the first synchronised backward pass, in the order the
  /// gradients became ready on rank 0.
  bool rebuild_buckets = true;
  /// At construction, check that every rank registered the same parameters (one small
  /// allgather); a difference throws Error(Mismatch) naming the ranks.
  bool verify_parameters = true;
  /// Bucket memory on a device (see BucketMemory); empty: host buckets, host gradients.
  std::shared_ptr<BucketMemory> memory;
};

/// One bucket as a communication hook sees it (the spans are valid during the hook's call).
struct GradBucket {
  /// Position of the bucket (the order in which buckets are reduced).
  std::size_t index = 0;
  /// The flat gradients of the bucket's parameters, one dtype; the hook leaves the average
  /// over all ranks here.
  BufferView buffer;
  /// The parameters in the bucket, in slot order, and their element offsets in `buffer`.
  std::span<const std::size_t> parameters;
  std::span<const std::size_t> offsets;
  /// The Reducer's communicator.
  Communicator* comm = nullptr;
  /// True for the last bucket of the backward pass.
  bool is_last = false;
  /// Device buckets: the stream the gradients were copied in on; a hook passes it as
  /// CallOptions::stream. Null for host buckets.
  void* stream = nullptr;
};

/// How a bucket is reduced (PyTorch's DDP communication hooks). start() is called when the
/// bucket is ready (from the thread that calls mark_variable_ready, in bucket order) and must
/// start the collective and return its Work without waiting; finalize_backward() waits for that
/// Work, then calls finish() (on its own thread), after which `bucket.buffer` must hold the
/// average of the ranks' gradients. A hook instance serves one Reducer.
class CommHook {
 public:
  virtual ~CommHook() = default;
  /// "allreduce", "fp16_compress", ...
  virtual std::string_view name() const noexcept = 0;
  virtual std::shared_ptr<Work> start(const GradBucket& bucket) = 0;
  virtual void finish(const GradBucket& bucket) { static_cast<void>(bucket); }
};

/// The default: allreduce with ReduceOp::avg, in place, in the bucket's dtype.
std::unique_ptr<CommHook> allreduce_hook();
/// PyTorch's fp16_compress_hook: an f32 (or f64) bucket is divided by the world size, rounded
/// to IEEE half, summed over the ranks in half (tandem adds in f32 and rounds each partial sum
/// back to half) and widened back into the bucket. Halves the bytes on the wire at the cost of
/// half precision (about 3 decimal digits; values beyond 65504 after the division become
/// infinite). Buckets of other dtypes are reduced as allreduce_hook does.
std::unique_ptr<CommHook> fp16_compress_hook();
/// Same with bfloat16: the range of f32 with about 2 decimal digits.
std::unique_ptr<CommHook> bf16_compress_hook();

/// Assigns parameters to buckets, as c10d's compute_bucket_assignment_by_size: parameters are
/// taken in `order` (indices into `gradients`), each dtype fills its own open bucket, and a
/// bucket closes once it holds at least its cap in bytes: first_bucket_bytes for the first
/// bucket of each dtype, bucket_cap_bytes after it. Buckets are returned in the order in which
/// they become complete when gradients arrive in `order` (the position of their last
/// parameter). Throws Error(InvalidArgument) unless `order` is a permutation of the indices.
std::vector<std::vector<std::size_t>> compute_bucket_assignment_by_size(
    std::span<const BufferView> gradients, std::span<const std::size_t> order,
    std::size_t first_bucket_bytes, std::size_t bucket_cap_bytes);

/// What a bucket holds (Reducer::stats()).
struct BucketInfo {
  DataType dtype = DataType::f32;
  /// Elements and bytes of the flat buffer.
  std::size_t count = 0;
  std::size_t bytes = 0;
  std::vector<std::size_t> parameters;
  std::vector<std::size_t> offsets;
};

/// A bucket's collective as it was started.
struct LaunchRecord {
  std::size_t bucket = 0;
  /// mark_variable_ready calls of the pass made before this launch (the one that completed
  /// the bucket included): a launch with marks_before < num_parameters() overlapped backward.
  std::size_t marks_before = 0;
};

struct ReducerStats {
  std::vector<BucketInfo> buckets;
  /// True once the buckets were rebuilt in rank 0's ready order.
  bool rebuilt = false;
  /// Changes each time bucket memory moves (the rebuild): with gradient_as_bucket_view the
  /// framework must then point its gradients at the new bucket_view()s.
  std::uint64_t bucket_generation = 0;
  /// Synchronised and local (no_sync) backward passes finalised so far.
  std::uint64_t sync_passes = 0;
  std::uint64_t local_passes = 0;
  /// The launches of the last synchronised pass, in launch order.
  std::vector<LaunchRecord> launches;
  /// The order in which parameters were marked ready in the last synchronised pass
  /// (parameters marked unused are not in it).
  std::vector<std::size_t> ready_order;
  /// Name of the communication hook.
  std::string hook;
};

class NoSyncGuard;

/// Averages gradients across the ranks of a communicator, bucket by bucket, overlapping
/// communication with backward. Methods are thread-safe (one internal mutex); marks of one
/// backward pass may come from any thread.
class Reducer {
 public:
  /// `gradients[i]` is where parameter i's gradient lives (host memory; `data` may be null
  /// when the framework has not allocated it yet: pass it later with set_gradient or
  /// mark_variable_ready(i, grad)). dtype and count are fixed for the Reducer's life.
  /// With gradient_as_bucket_view the current content of each non-null gradient is copied into
  /// its bucket slot, and the slot becomes the parameter's gradient storage.
  /// Collective when verify_parameters is set (every rank constructs its Reducer together).
  Reducer(std::shared_ptr<Communicator> comm, std::vector<BufferView> gradients,
          ReducerOptions options = {});
  /// Waits (up to the communicator's timeout) for bucket collectives still in flight, so that
  /// none writes to freed memory; past that, aborts the communicator.
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  std::size_t num_parameters() const noexcept;
  const ReducerOptions& options() const noexcept;
  Communicator& communicator() const noexcept;

  /// Parameter `index`'s slot in its bucket: with gradient_as_bucket_view, the storage the
  /// framework should use as that parameter's gradient. Valid until bucket_generation()
  /// changes (the rebuild after the first synchronised pass moves every slot; the content moves
  /// with it, and the old memory stays valid until the next backward pass starts).
  BufferView bucket_view(std::size_t index) const;
  std::uint64_t bucket_generation() const noexcept;

  /// Tells where parameter `index`'s gradient now lives (the framework reallocated it).
  /// Throws Error(InvalidArgument) when its dtype or count differ from the registered ones.
  void set_gradient(std::size_t index, BufferView gradient);

  /// Optional, before a backward pass: the parameters that will get no gradient in it (the
  /// framework knows them from the graph). With find_unused_parameters they count as ready at
  /// once, with a zero gradient, so their buckets need not wait for finalize_backward().
  /// Throws Error(InvalidArgument) when `unused` is not empty and find_unused_parameters is
  /// false, or when called after the pass's first mark_variable_ready.
  void prepare_for_backward(std::span<const std::size_t> unused = {});

  /// Parameter `index`'s gradient of this pass is complete. Copies it into its bucket slot
  /// (unless it lives there) and, when its bucket is complete and every earlier bucket started,
  /// starts the bucket's allreduce. Marking a parameter twice in one pass throws
  /// Error(InvalidArgument). In a no_sync pass nothing is copied or communicated.
  void mark_variable_ready(std::size_t index);
  /// Same, after set_gradient(index, gradient).
  void mark_variable_ready(std::size_t index, BufferView gradient);

  /// Ends a backward pass; call it after every pass, no_sync or not. In a synchronised pass:
  /// parameters not marked are marked unused (find_unused_parameters) or make it throw
  /// Error(InvalidArgument) naming them; then it waits for every bucket (deadline: the
  /// communicator's timeout), writes the averages back into gradients that do not live in
  /// their slot, and after the first synchronised pass rebuilds the buckets (collective).
  /// A failed collective throws its Error with the bucket named. The pass's state is reset
  /// whether it succeeds or throws.
  void finalize_backward();

  /// No communication while false (gradient accumulation): mark_variable_ready only records
  /// the mark, gradients stay (and accumulate) in the framework's storage, and the next
  /// synchronised pass averages the accumulated sums. Frameworks accumulate into the same
  /// gradient storage (or, with gradient_as_bucket_view, into the slot), so nothing else is
  /// needed. A change takes effect at the next backward pass, never in the middle of one.
  void set_require_sync(bool sync) noexcept;
  bool require_sync() const noexcept;
  /// RAII: no synchronisation until the guard is destroyed (PyTorch's `with ddp.no_sync():`).
  [[nodiscard]] NoSyncGuard no_sync() noexcept;

  /// Replaces the communication hook (default allreduce_hook()). Call between passes, the
  /// same hook on every rank.
  void register_comm_hook(std::unique_ptr<CommHook> hook);

  ReducerStats stats() const;
  /// Seconds finalize_backward() has waited for bucket collectives, over every synchronised
  /// pass so far: the communication a run did not hide behind backward, and its wait for
  /// slower ranks (StepProfiler tells them apart).
  double exposed_seconds() const noexcept;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// Turns synchronisation off for its lifetime and restores the previous setting after.
class NoSyncGuard {
 public:
  explicit NoSyncGuard(Reducer& reducer) noexcept
      : reducer_(&reducer), previous_(reducer.require_sync()) {
    reducer.set_require_sync(false);
  }
  ~NoSyncGuard() {
    if (reducer_) reducer_->set_require_sync(previous_);
  }
  NoSyncGuard(NoSyncGuard&& other) noexcept
      : reducer_(std::exchange(other.reducer_, nullptr)), previous_(other.previous_) {}
  NoSyncGuard(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(NoSyncGuard&&) = delete;

 private:
  Reducer* reducer_;
  bool previous_;
};

inline NoSyncGuard Reducer::no_sync() noexcept {
  return NoSyncGuard(*this);
}

}  // namespace tandem::ddp
