#pragma once
// What a configuration means for a given world size: batch per rank and per optimizer step,
// the learning rate after scaling, and its schedule over the steps.

#include "config.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace fashion_mnist {

struct Setup {
  int world_size = 1;
  /// Images of one forward/backward pass on one rank.
  std::uint64_t per_rank_batch = 0;
  /// per_rank_batch * world_size: images of one forward/backward pass over all ranks.
  std::uint64_t global_batch = 0;
  std::uint64_t accumulation_steps = 1;
  /// global_batch * accumulation_steps: images behind one optimizer step.
  std::uint64_t step_batch = 0;
  double base_lr = 0;
  /// base_lr scaled for step_batch against training.reference_batch.
  double lr = 0;
  /// How lr was obtained, e.g. "linear: 0.05 x 256/128".
  std::string lr_rule;
};

/// lr scaled from reference_batch to `batch` images per optimizer step: linear (lr * b/ref),
/// sqrt (lr * sqrt(b/ref)) or none.
double scale_lr(double lr, std::uint64_t batch, std::uint64_t reference_batch, LrScaling rule);

/// Resolves the batch sizes and the learning rate. Throws tandem::Error(InvalidArgument) when
/// training.batch_size cannot be split evenly across `world_size` ranks, naming the nearest
/// valid values.
Setup resolve_setup(const Config& config, int world_size);

/// resolve_setup() for the ranks left after some were lost (training.on_rank_loss=continue):
/// a global batch the new world size does not divide becomes the nearest multiple of it (128
/// on 3 ranks: 129, 43 each), and the learning rate follows it by training.lr_scaling.
Setup resolve_setup_after_loss(const Config& config, int world_size);

/// The optimizer step after which this rank SIGKILLs itself (config.fault), or nullopt: no
/// fault configured, another rank's, or not this round (restart_count > 0: a restarted run
/// goes on). A random step lies in [1, last_step - 1] and is the same on every rank. Throws
/// tandem::Error(InvalidArgument) when fault.kill_rank is not a rank of the run.
std::optional<std::uint64_t> planned_kill(const Config& config, int rank, int world_size,
                                          std::uint64_t last_step, std::int64_t restart_count);

/// The learning rate of each optimizer step: a linear warmup from peak/warmup_steps to peak
/// over the first warmup_steps steps, then constant or a cosine decay that reaches 0 at
/// total_steps.
struct LrSchedule {
  double peak = 0;
  std::uint64_t warmup_steps = 0;
  std::uint64_t total_steps = 0;
  LrDecay decay = LrDecay::none;

  /// Learning rate of optimizer step `step` (0-based).
  double at(std::uint64_t step) const noexcept;
};

}  // namespace fashion_mnist
