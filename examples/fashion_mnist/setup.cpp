#include "setup.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>

namespace fashion_mnist {

double scale_lr(double lr, std::uint64_t batch, std::uint64_t reference_batch, LrScaling rule) {
  const double ratio = static_cast<double>(batch) / static_cast<double>(reference_batch);
  switch (rule) {
    case LrScaling::linear:
      return lr * ratio;
    case LrScaling::sqrt:
      return lr * std::sqrt(ratio);
    case LrScaling::none:
      return lr;
  }
  return lr;
}

std::optional<std::uint64_t> planned_kill(const Config& config, int rank, int world_size,
                                          std::uint64_t last_step, std::int64_t restart_count) {
  const FaultConfig& f = config.fault;
  if (f.kill_at_step == 0 && !f.kill_at_random) return std::nullopt;
  if (f.kill_rank >= static_cast<std::uint64_t>(world_size)) {
    TANDEM_THROW(tandem::ErrorCode::InvalidArgument,
                 "fault.kill_rank {} (set at {}) is not a rank of this run of {} rank{}: use 0 to "
                 "{}",
                 f.kill_rank, config.where("fault.kill_rank"), world_size,
                 world_size == 1 ? "" : "s", world_size - 1);
  }
  if (restart_count > 0 || f.kill_rank != static_cast<std::uint64_t>(rank)) return std::nullopt;
  if (!f.kill_at_random) return f.kill_at_step;
  std::mt19937_64 gen(f.seed);
  return 1 + gen() % std::max<std::uint64_t>(1, last_step - std::min<std::uint64_t>(last_step, 1));
}

Setup resolve_setup(const Config& config, int world_size) {
  TANDEM_CHECK(world_size >= 1, "world size {}", world_size);
  const auto& t = config.training;
  const auto world = static_cast<std::uint64_t>(world_size);
  Setup s;
  s.world_size = world_size;
  if (t.batch_size != 0) {
    if (t.batch_size % world != 0) {
      const std::uint64_t below = t.batch_size / world * world;
      const std::uint64_t above = below + world;
      TANDEM_THROW(tandem::ErrorCode::InvalidArgument,
                   "training.batch_size={} (set at {}) is the global batch and cannot be split "
                   "evenly across {} ranks: use a multiple of {} ({}{}), or set "
                   "training.batch_size_per_rank instead",
                   t.batch_size, config.where("training.batch_size"), world_size, world_size,
                   below == 0 ? "" : fmt::format("{} or ", below), above);
    }
    s.per_rank_batch = t.batch_size / world;
  } else {
    s.per_rank_batch = t.batch_size_per_rank;
  }
  s.global_batch = s.per_rank_batch * world;
  s.accumulation_steps = t.accumulation_steps;
  s.step_batch = s.global_batch * s.accumulation_steps;
  s.base_lr = t.lr;
  s.lr = scale_lr(t.lr, s.step_batch, t.reference_batch, t.lr_scaling);
  switch (t.lr_scaling) {
    case LrScaling::linear:
      s.lr_rule = fmt::format("linear: {} x {}/{}", t.lr, s.step_batch, t.reference_batch);
      break;
    case LrScaling::sqrt:
      s.lr_rule = fmt::format("sqrt: {} x sqrt({}/{})", t.lr, s.step_batch, t.reference_batch);
      break;
    case LrScaling::none:
      s.lr_rule = "none: the base lr";
      break;
  }
  return s;
}

Setup resolve_setup_after_loss(const Config& config, int world_size) {
  TANDEM_CHECK(world_size >= 1, "world size {}", world_size);
  Config kept = config;
  auto& batch = kept.training.batch_size;
  const auto world = static_cast<std::uint64_t>(world_size);
  if (batch != 0 && batch % world != 0)
    batch = std::max<std::uint64_t>(1, (batch + world / 2) / world) * world;
  return resolve_setup(kept, world_size);
}

double LrSchedule::at(std::uint64_t step) const noexcept {
  if (step < warmup_steps) {
    return peak * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  }
  if (decay == LrDecay::none || total_steps <= warmup_steps) return peak;
  const double span = static_cast<double>(total_steps - warmup_steps);
  const double t = std::min(1.0, static_cast<double>(step - warmup_steps) / span);
  return peak * 0.5 * (1.0 + std::cos(std::numbers::pi * t));
}

}  // namespace fashion_mnist
