#pragma once
/// @file torch.hpp
/// tandem for LibTorch (library tandem_torch, built when LibTorch is found):
/// DistributedDataParallel over a torch::nn::Module, a GradScaler whose found-inf decision is
/// agreed by every rank, atomic rank-0 checkpoints, a prefetching image loader, and metrics
/// averaged across ranks.
///
/// A training step with DDP:
/// @code
///   auto comm = tandem::Communicator::from_env();
///   auto net = std::make_shared<Net>();              // any torch::nn::Module
///   tandem::torch::DistributedDataParallel ddp(net, comm);   // rank 0's weights everywhere
///   torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
///   for (auto& batch : loader) {
///     opt.zero_grad();
///     auto out = ddp.forward([&] { return net->forward(batch.images); });
///     torch::nn::functional::cross_entropy(out, batch.labels).backward();
///     opt.step();                                    // gradients are the average over ranks
///   }
/// @endcode
/// backward() drives the Reducer from autograd hooks: a bucket's allreduce starts as soon as
/// its last gradient is accumulated, overlapping the rest of backward, and backward() returns
/// once every bucket is averaged. Inside `auto guard = ddp.no_sync();` backward passes only
/// accumulate locally (gradient accumulation); the next pass outside it averages the sums.

#include <tandem/communicator.hpp>
#include <tandem/data.hpp>
#include <tandem/ddp.hpp>
#include <tandem/loader.hpp>

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace tandem::torch {

// ---- DistributedDataParallel --------------------------------------------------------------

struct DdpOptions {
  /// Buckets, find_unused_parameters, gradient_as_bucket_view, ... (PyTorch's defaults).
  ddp::ReducerOptions reducer;
  /// Broadcast rank 0's buffers (e.g. BatchNorm running statistics) before every forward,
  /// as PyTorch's broadcast_buffers=True. Parameters and buffers are always broadcast from
  /// rank 0 at construction.
  bool broadcast_buffers = true;
  /// Gradient compression: "allreduce" (none), "fp16_compress" or "bf16_compress".
  std::string comm_hook = "allreduce";
};

/// Data-parallel training of one module replica per rank. Construction is collective: every
/// rank must construct it over the same architecture (checked) at the same point.
///
/// Parameters must be dense, contiguous tensors of f32, f64, f16 or bf16, all on the CPU or all
/// on one CUDA device (Error InvalidArgument otherwise). A CUDA module keeps its buckets on its
/// device (bucket_memory()): gradients are copied in and averaged on torch's current streams,
/// and the host waits for the GPU only where the caller does (e.g. loss.item()); the
/// compression hooks are host-only and refused there. The Reducer's parameter i is the i-th
/// parameter of module->parameters() that requires grad. When the reduction fails (a peer lost, a
/// timeout, parameters that got no gradient without find_unused_parameters), backward() throws that
/// tandem::Error, code and message unchanged; after a backward that threw midway, the next
/// pre_forward() resets the Reducer (a failed communicator must still be rebuilt on every rank).
/// Parameters whose data was replaced after construction (e.g. by Module::load, which gives
/// them new autograd accumulators) are hooked again by the next pre_forward().
class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<::torch::nn::Module> module,
                          std::shared_ptr<Communicator> comm, DdpOptions options = {});
  /// Same for a module holder (a TORCH_MODULE type such as torch::nn::Linear).
  template <class Holder, class = decltype(std::declval<Holder&>().ptr())>
  DistributedDataParallel(Holder holder, std::shared_ptr<Communicator> comm,
                          DdpOptions options = {})
      : DistributedDataParallel(std::static_pointer_cast<::torch::nn::Module>(holder.ptr()),
                                std::move(comm), std::move(options)) {}
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  ::torch::nn::Module& module() const noexcept;
  const std::shared_ptr<::torch::nn::Module>& module_ptr() const noexcept;
  Communicator& communicator() const noexcept;
  ddp::Reducer& reducer() noexcept;

  /// Before a forward pass whose backward will run: broadcasts buffers (broadcast_buffers),
  /// points gradients at their bucket slots (gradient_as_bucket_view) and readies the Reducer.
  void pre_forward();
  /// After it, with the outputs backward will start from: with find_unused_parameters, the
  /// parameters the graph cannot reach are reduced as zeros at once instead of at the end.
  void post_forward(const std::vector<::torch::Tensor>& outputs);
  /// pre_forward(), `fn()`, post_forward(its tensor result) in one call.
  template <class Fn>
  auto forward(Fn&& fn) -> decltype(fn()) {
    pre_forward();
    auto out = std::forward<Fn>(fn)();
    if constexpr (std::is_convertible_v<decltype(out), ::torch::Tensor>) {
      post_forward({out});
    } else {
      post_forward({});
    }
    return out;
  }

  /// No gradient averaging while the guard lives (gradient accumulation).
  [[nodiscard]] ddp::NoSyncGuard no_sync() noexcept;

  /// Number of synchronised and local backward passes so far, buckets, launches: see
  /// ddp::ReducerStats.
  ddp::ReducerStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Broadcasts every parameter and buffer of `module` from `root` (collective).
void broadcast_module(Communicator& comm, ::torch::nn::Module& module, int root = 0);

/// The bucket memory DistributedDataParallel gives its Reducer for parameters on `device`:
/// torch tensors on that device, copies on torch's current stream, bucket collectives started
/// behind it. DistributedDataParallel uses it for CUDA modules by itself; pass it in
/// ReducerOptions::memory to keep a CPU module's buckets in torch memory too, or to drive a
/// ddp::Reducer of your own over CUDA gradients.
std::shared_ptr<ddp::BucketMemory> bucket_memory(c10::Device device);

// ---- mixed precision ----------------------------------------------------------------------

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  /// Steps without an inf/NaN gradient before the scale grows.
  std::int64_t growth_interval = 2000;
  /// When false every method is a pass-through (scale 1, every step taken).
  bool enabled = true;
};

struct GradScalerState {
  double scale = 65536.0;
  std::int64_t growth_tracker = 0;
};

/// Dynamic loss scaling as torch.cuda.amp.GradScaler: scale the loss, unscale the gradients
/// before the optimizer step, skip the step when any rank found an inf or NaN gradient (one
/// allreduce of a flag, so every rank skips the same steps), and adapt the scale.
class GradScaler {
 public:
  explicit GradScaler(std::shared_ptr<Communicator> comm, GradScalerOptions options = {});

  /// loss * scale.
  ::torch::Tensor scale(const ::torch::Tensor& loss) const;
  /// Divides the optimizer's gradients by the scale and records whether any rank saw a
  /// non-finite one (collective). At most once per step; step() calls it when you did not.
  void unscale(::torch::optim::Optimizer& optimizer);
  /// Steps the optimizer unless a non-finite gradient was found; returns whether it stepped.
  bool step(::torch::optim::Optimizer& optimizer);
  /// Adapts the scale after step(): backoff on inf/NaN, growth after growth_interval good
  /// steps. Call once per step.
  void update();

  double get_scale() const noexcept;
  /// Steps skipped so far.
  std::int64_t skipped_steps() const noexcept;
  GradScalerState state() const noexcept;
  void load_state(const GradScalerState& state);

 private:
  std::shared_ptr<Communicator> comm_;
  GradScalerOptions options_;
  GradScalerState state_;
  std::int64_t skipped_ = 0;
  bool unscaled_ = false;
  bool found_inf_ = false;
};

// ---- checkpoints --------------------------------------------------------------------------

/// Everything besides the weights that a resumed run needs.
struct TrainingState {
  std::uint64_t step = 0;
  std::uint64_t epoch = 0;
  data::SamplerState sampler;
  std::optional<GradScalerState> scaler;
  /// Free-form (e.g. the config the run was started with), JSON text.
  std::string extra_json;
};

struct CheckpointOptions {
  /// Checkpoints kept in the directory (older ones are removed after a successful save).
  std::size_t keep_last = 2;
};

/// Saves and loads checkpoints in one directory: `ckpt-<step>.tdm` files plus a `latest`
/// pointer, each written to a temporary file, fsynced and renamed (the directory fsynced too),
/// so that a crash at any moment leaves the previous checkpoint intact. Each file carries a
/// CRC-32 of its content, verified on load. Files hold the model's parameters and buffers,
/// the optimizer's state, the TrainingState and the CPU RNG state of every rank (each rank gets
/// its own back when the world size is unchanged, rank 0's otherwise). Loading copies into the
/// module's existing tensors, so a DistributedDataParallel over it stays valid.
class Checkpointer {
 public:
  Checkpointer(std::shared_ptr<Communicator> comm, std::filesystem::path dir,
               CheckpointOptions options = {});

  /// Collective: rank 0 writes, then every rank waits for it (so a rank that dies after
  /// save() returned leaves a checkpoint behind). Returns the file written. Throws Error(Io)
  /// naming the file and the reason (e.g. "No space left on device") on every rank; the
  /// previous checkpoint is kept.
  std::filesystem::path save(::torch::nn::Module& module, ::torch::optim::Optimizer& optimizer,
                             const TrainingState& state);

  /// Loads the newest checkpoint of the directory into module and optimizer on this rank
  /// (every rank calls it); nullopt when there is none. A file whose checksum does not match
  /// is named in a warning and the next older one is tried; when none is valid, throws
  /// Error(Io) naming the files.
  std::optional<TrainingState> load_latest(::torch::nn::Module& module,
                                           ::torch::optim::Optimizer& optimizer);

  const std::filesystem::path& directory() const noexcept;

 private:
  std::shared_ptr<Communicator> comm_;
  std::filesystem::path dir_;
  CheckpointOptions options_;
};

/// Collective: every rank ends with `root`'s model parameters and buffers, optimizer state and
/// TrainingState, sent over `comm` (no file is read or written): what a rank that joins a
/// running job, or a survivor that fell a step behind the others when a rank was lost, needs to
/// go on with them. Every rank passes the same root; root passes its `state` (the others' is
/// ignored) and its objects are left unchanged. Loads in place, like Checkpointer::load_latest,
/// so a DistributedDataParallel over the module stays valid. Returns root's TrainingState on
/// every rank. Throws InvalidArgument on every rank when one of them cannot load the state
/// (a different model or optimizer).
TrainingState share_state(Communicator& comm, int root, ::torch::nn::Module& module,
                          ::torch::optim::Optimizer& optimizer, const TrainingState& state);

// ---- data and metrics ---------------------------------------------------------------------

/// A batch of images (N x 1 x rows x cols, f32, normalised) and labels (N, i64).
struct ImageBatch {
  ::torch::Tensor images;
  ::torch::Tensor labels;
};

/// Batches of this rank's remaining share of an epoch (sampler.remaining()), made on a
/// background thread `depth` batches ahead. The last batch may be smaller unless drop_last.
/// The dataset must outlive the loader; the sampler is read only at construction.
class ImageLoader {
 public:
  ImageLoader(const data::ImageDataset& dataset, const data::DistributedSampler& sampler,
              std::size_t batch_size, bool drop_last = false, data::Normalize normalize = {},
              data::LoaderOptions options = {});
  std::optional<ImageBatch> next();
  /// Batches in the epoch (from the sampler's position when the loader was made).
  std::size_t size() const noexcept;

 private:
  std::shared_ptr<const std::vector<std::size_t>> indices_;
  std::size_t num_batches_;
  data::BatchLoader<ImageBatch> loader_;
};

/// Sums (in place) values across ranks: e.g. {correct, seen, loss_sum} of an evaluation.
void all_sum(Communicator& comm, std::span<double> values);
/// Mean of a scalar across ranks.
double all_average(Communicator& comm, double value);

}  // namespace tandem::torch
