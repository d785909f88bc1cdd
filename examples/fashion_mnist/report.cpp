#include "report.hpp"

#include <fmt/format.h>

namespace fashion_mnist {

void StepTimer::add(double seconds) noexcept {
  ++count_;
  all_ += seconds;
  if (count_ > skip_) kept_ += seconds;
}

double StepTimer::mean_ms() const noexcept {
  if (count_ == 0) return 0;
  if (count_ <= skip_) return all_ * 1e3 / static_cast<double>(count_);
  return kept_ * 1e3 / static_cast<double>(count_ - skip_);
}

std::string describe_setup(const Config& c, const Setup& s, const RunFacts& f) {
  const auto& t = c.training;
  std::string out;
  out += fmt::format("fashion_mnist: {} rank{}{}, 1 compute thread per rank, config {}\n",
                     s.world_size, s.world_size == 1 ? "" : "s",
                     s.world_size == 1 ? "" : fmt::format(" over {}", f.transport), c.source);
  out += fmt::format("  data        {}: {} training, {} test images\n", c.data.dir, f.train_images,
                     f.test_images);
  out += fmt::format("  batch       {} per rank x {} rank{} = {} global", s.per_rank_batch,
                     s.world_size, s.world_size == 1 ? "" : "s", s.global_batch);
  if (s.accumulation_steps > 1) {
    out += fmt::format(", x {} accumulation steps = {} per optimizer step", s.accumulation_steps,
                       s.step_batch);
  }
  out += "\n";
  out += fmt::format("  lr          {:.6g} ({}), warmup {} steps, decay {}\n", s.lr, s.lr_rule,
                     t.warmup_steps, to_string(t.lr_decay));
  out +=
      fmt::format("  optimizer   SGD, momentum {}, weight decay {}\n", t.momentum, t.weight_decay);
  out += fmt::format("  device      {}\n", f.device);
  out += fmt::format("  precision   {}{}\n", to_string(t.precision),
                     t.grad_scaler ? ", dynamic loss scaling (GradScaler)" : "");
  out += fmt::format("  model       2 conv + 2 fc, {} parameters\n", f.parameters);
  if (c.ddp.enabled) {
    out += fmt::format("  ddp         {}; first bucket {} MiB, cap {} MiB, hook {}{}{}\n",
                       f.buckets, c.ddp.first_bucket_mb, c.ddp.bucket_cap_mb, c.ddp.comm_hook,
                       c.ddp.gradient_as_bucket_view ? ", gradient_as_bucket_view" : "",
                       c.ddp.find_unused_parameters ? ", find_unused_parameters" : "");
  } else {
    out += "  ddp         off: every rank trains alone on its shard (compute-only baseline)\n";
  }
  out += fmt::format("  steps       {} epoch{} x {} steps = {}{}\n", t.epochs,
                     t.epochs == 1 ? "" : "s", f.steps_per_epoch, f.total_steps,
                     t.max_steps != 0 ? fmt::format(" (stopping at step {})", t.max_steps) : "");
  out +=
      fmt::format("  checkpoint  {}\n",
                  c.checkpoint.dir.empty()
                      ? std::string("none")
                      : fmt::format("{} ({}, keep {}, resume {})", c.checkpoint.dir,
                                    c.checkpoint.every_steps == 0
                                        ? std::string("each epoch")
                                        : fmt::format("every {} steps", c.checkpoint.every_steps),
                                    c.checkpoint.keep_last, c.checkpoint.resume ? "on" : "off"));
  return out;
}

std::string format_result_line(const RunResult& r) {
  return fmt::format(
      "result: world_size={} epochs={} steps={} global_batch={} test_accuracy={:.2f} "
      "ms_per_step={:.2f} images_per_s={:.1f}{}",
      r.world_size, r.epochs, r.steps, r.global_batch, r.test_accuracy, r.ms_per_step,
      r.images_per_s,
      r.ranks_lost == 0 && r.ranks_gained == 0
          ? std::string()
          : fmt::format(" ranks_lost={} ranks_gained={}", r.ranks_lost, r.ranks_gained));
}

}  // namespace fashion_mnist
