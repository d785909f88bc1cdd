#pragma once
// What rank 0 prints: the effective setup at the start and the machine-readable result line
// at the end, plus the step timer behind ms/step.

#include "config.hpp"
#include "setup.hpp"

#include <cstdint>
#include <string>

namespace fashion_mnist {

/// Mean wall time of a training step, leaving out the first `skip` steps (start-up: page
/// faults, allocator growth, the bucket rebuild). With `skip` steps or fewer measured, the
/// mean over all of them.
class StepTimer {
 public:
  explicit StepTimer(std::uint64_t skip = 20) : skip_(skip) {}
  void add(double seconds) noexcept;
  std::uint64_t count() const noexcept { return count_; }
  double mean_ms() const noexcept;

 private:
  std::uint64_t skip_;
  std::uint64_t count_ = 0;
  double all_ = 0;
  double kept_ = 0;
};

/// Facts about the run that only the training side knows.
struct RunFacts {
  std::uint64_t train_images = 0;
  std::uint64_t test_images = 0;
  std::uint64_t steps_per_epoch = 0;
  std::uint64_t total_steps = 0;  // epochs * steps_per_epoch
  std::uint64_t parameters = 0;
  std::string buckets;         // "2 buckets: 0.82 MiB, 0.08 MiB" or "off"
  std::string transport;       // "shm", "tcp", "-" for one rank
  std::string device = "cpu";  // rank 0's: "cpu" or "cuda:0"
};

/// The multi-line setup description (each line ends with '\n').
std::string describe_setup(const Config& config, const Setup& setup, const RunFacts& facts);

struct RunResult {
  int world_size = 1;
  std::uint64_t epochs = 0;
  std::uint64_t steps = 0;
  std::uint64_t global_batch = 0;
  double test_accuracy = 0;  // percent
  double ms_per_step = 0;
  double images_per_s = 0;
  /// Ranks lost on the way, the run going on without them (training.on_rank_loss=continue).
  std::uint64_t ranks_lost = 0;
  std::uint64_t ranks_gained = 0;  ///< replacements admitted (tandemrun --max-replacements)
};

/// "result: world_size=W epochs=E steps=S global_batch=G test_accuracy=A ms_per_step=M
/// images_per_s=I", then " ranks_lost=L" when the run lost ranks and went on (world_size is
/// then the world it ended with): the last line rank 0 prints (parsed by bench/).
std::string format_result_line(const RunResult& r);

}  // namespace fashion_mnist
