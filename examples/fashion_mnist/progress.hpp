#pragma once
// Rank 0's view of training: a progress bar redrawn in place on a terminal, or plain lines
// every N steps when the output is a pipe or a file (tandemrun, CI logs).

#include "config.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace fashion_mnist {

struct StepStatus {
  std::uint64_t epoch = 1;  // 1-based
  std::uint64_t epochs = 1;
  std::uint64_t step_in_epoch = 0;  // steps done in this epoch
  std::uint64_t steps_in_epoch = 0;
  std::uint64_t step = 0;  // optimizer steps done since the start of training
  std::uint64_t total_steps = 0;
  double loss = 0;
  double lr = 0;
  double images_per_s = 0;
  double eta_s = 0;
};

/// "0:42", "12:05", "1:02:03".
std::string format_duration(double seconds);
/// One redraw of the bar, `width` characters of bar between brackets.
std::string format_bar(const StepStatus& s, int width = 30);
/// One plain progress line.
std::string format_line(const StepStatus& s);

class Progress {
 public:
  /// auto_detect chooses the bar when `out` is a terminal, lines otherwise.
  Progress(ProgressMode mode, std::uint64_t every_steps, std::FILE* out = stdout);

  ProgressMode mode() const noexcept { return mode_; }
  /// Reports a finished step; draws or prints when due.
  void update(const StepStatus& s);
  /// Ends the bar's line (before other output); no-op in the other modes.
  void break_line();

 private:
  ProgressMode mode_;
  std::uint64_t every_;
  std::FILE* out_;
  bool bar_open_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace fashion_mnist
