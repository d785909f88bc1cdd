#include "progress.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <unistd.h>

namespace fashion_mnist {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const auto s = static_cast<std::uint64_t>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

std::string format_bar(const StepStatus& s, int width) {
  const double frac = s.steps_in_epoch == 0 ? 1.0
                                            : static_cast<double>(s.step_in_epoch) /
                                                  static_cast<double>(s.steps_in_epoch);
  const int filled = std::clamp(static_cast<int>(frac * width), 0, width);
  std::string bar(static_cast<std::size_t>(filled), '=');
  if (filled < width) bar += '>';
  bar.resize(static_cast<std::size_t>(width), ' ');
  return fmt::format("epoch {}/{} [{}] {}/{} loss {:.4f} {:.0f} img/s ETA {}", s.epoch, s.epochs,
                     bar, s.step_in_epoch, s.steps_in_epoch, s.loss, s.images_per_s,
                     format_duration(s.eta_s));
}

std::string format_line(const StepStatus& s) {
  return fmt::format(
      "epoch {}/{} step {}/{} (total {}/{}) loss {:.4f} lr {:.5f} {:.0f} img/s "
      "ETA {}",
      s.epoch, s.epochs, s.step_in_epoch, s.steps_in_epoch, s.step, s.total_steps, s.loss, s.lr,
      s.images_per_s, format_duration(s.eta_s));
}

Progress::Progress(ProgressMode mode, std::uint64_t every_steps, std::FILE* out)
    : mode_(mode), every_(std::max<std::uint64_t>(every_steps, 1)), out_(out) {
  if (mode_ == ProgressMode::auto_detect) {
    mode_ = ::isatty(::fileno(out_)) ? ProgressMode::bar : ProgressMode::lines;
  }
}

void Progress::update(const StepStatus& s) {
  const bool last = s.step_in_epoch == s.steps_in_epoch;
  switch (mode_) {
    case ProgressMode::bar: {
      // Redraw at most 10 times a second: a terminal is slow next to a 10 ms step.
      const auto now = std::chrono::steady_clock::now();
      if (!last && bar_open_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
      last_draw_ = now;
      std::fprintf(out_, "\r%s\x1b[K", format_bar(s).c_str());
      bar_open_ = true;
      if (last) break_line();
      std::fflush(out_);
      break;
    }
    case ProgressMode::lines:
      if (s.step % every_ == 0 || last) {
        std::fprintf(out_, "%s\n", format_line(s).c_str());
        std::fflush(out_);
      }
      break;
    case ProgressMode::auto_detect:
    case ProgressMode::none:
      break;
  }
}

void Progress::break_line() {
  if (!bar_open_) return;
  std::fputc('\n', out_);
  std::fflush(out_);
  bar_open_ = false;
}

}  // namespace fashion_mnist
