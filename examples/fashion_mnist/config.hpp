#pragma once
// The example's configuration: a YAML file (config.yaml documents every key) plus
// `-o section.key=value` overrides. Parsing is strict: an unknown key, a value of the wrong
// type or outside its range, and contradictory keys are errors that name the key, where it
// was set (file:line or the -o option) and the valid values.

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fashion_mnist {

enum class LrScaling { linear, sqrt, none };
enum class LrDecay { none, cosine };
enum class Precision { fp32, bf16 };
enum class DeviceKind { cpu, cuda };
enum class ProgressMode { auto_detect, bar, lines, none };
/// What the survivors do when a rank is lost: stop (the launcher restarts the job from its
/// last checkpoint, if asked to), or go on without it (shrink the group, redo the step).
enum class OnRankLoss { stop, go_on };

std::string_view to_string(LrScaling v) noexcept;
std::string_view to_string(LrDecay v) noexcept;
std::string_view to_string(Precision v) noexcept;
std::string_view to_string(DeviceKind v) noexcept;
std::string_view to_string(ProgressMode v) noexcept;
std::string_view to_string(OnRankLoss v) noexcept;

struct DataConfig {
  std::string dir = "/usr/share/datasets/fashion-mnist";
  std::uint64_t limit_train = 0;  // 0: every image
  std::uint64_t limit_test = 0;
  /// Loader threads per rank (0: batches made on the training thread), PyTorch's meaning.
  std::uint64_t num_workers = 1;
  /// Batches each worker prepares ahead.
  std::uint64_t prefetch_factor = 2;
};

struct TrainingConfig {
  std::uint64_t epochs = 10;
  /// Global batch of one forward/backward pass, divided across the ranks (0: not set).
  std::uint64_t batch_size = 128;
  /// Alternative: the batch of one rank (0: not set). Exactly one of the two is set.
  std::uint64_t batch_size_per_rank = 0;
  std::uint64_t accumulation_steps = 1;
  double lr = 0.05;
  std::uint64_t reference_batch = 128;
  LrScaling lr_scaling = LrScaling::linear;
  std::uint64_t warmup_steps = 100;
  LrDecay lr_decay = LrDecay::cosine;
  double momentum = 0.9;
  double weight_decay = 0.0;
  std::uint64_t seed = 42;
  /// cpu, or cuda: rank r trains on GPU (local rank % GPUs), several ranks may share one.
  DeviceKind device = DeviceKind::cpu;
  Precision precision = Precision::fp32;
  bool grad_scaler = false;
  std::uint64_t max_steps = 0;  // 0: no limit
  std::uint64_t eval_batch_size = 500;
  OnRankLoss on_rank_loss = OnRankLoss::stop;
  /// With on_rank_loss=continue: how long the survivors wait at their first step after a
  /// loss for a replacement to join (tandemrun --max-replacements) before going on without.
  double replacement_wait_s = 0;
};

struct DdpConfig {
  bool enabled = true;
  double bucket_cap_mb = 25.0;
  double first_bucket_mb = 1.0;
  bool gradient_as_bucket_view = false;
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;
  std::string comm_hook = "allreduce";
};

struct CheckpointConfig {
  std::string dir;                // empty: no checkpoints
  std::uint64_t every_steps = 0;  // 0: at the end of each epoch
  bool resume = true;
  std::uint64_t keep_last = 2;
};

/// Fault injection, to see a failure recovered: one rank SIGKILLs itself once, in the first
/// round of a run (a launcher's restarts go on undisturbed).
struct FaultConfig {
  /// The rank that kills itself.
  std::uint64_t kill_rank = 0;
  /// The optimizer step after which it does (0: never).
  std::uint64_t kill_at_step = 0;
  /// kill_at_step is "random": a step drawn from `seed` (the same on every rank).
  bool kill_at_random = false;
  std::uint64_t seed = 1;
  /// A slow rank: rank slow_rank spends slow_rank_ms more in every step's compute (0: off).
  std::uint64_t slow_rank = 0;
  std::uint64_t slow_rank_ms = 0;
  /// A slow loader: every rank waits this long for each batch (0: off).
  std::uint64_t slow_data_ms = 0;
};

struct LogConfig {
  std::string metrics;  // empty: no metrics file; otherwise .csv or .json
  ProgressMode progress = ProgressMode::auto_detect;
  std::uint64_t every_steps = 50;
  /// Rank 0 prints where a step's time went every this many steps (0: only at the end, or
  /// every 500 steps when TANDEM_DEBUG is INFO or more).
  std::uint64_t breakdown_every_steps = 0;
};

struct Config {
  DataConfig data;
  TrainingConfig training;
  DdpConfig ddp;
  CheckpointConfig checkpoint;
  FaultConfig fault;
  LogConfig log;
  /// Where each key that was given got its value ("config.yaml:12", "-o", "--data"); keys
  /// left at their built-in default are absent.
  std::map<std::string, std::string, std::less<>> origin;
  /// The configuration's source, for messages ("config.yaml" or "<built-in>").
  std::string source;

  /// origin of `key`, or "default".
  std::string where(std::string_view key) const;
};

/// One override, as given on the command line: "training.epochs=3". `origin` names it in
/// messages ("-o", "--data").
struct Override {
  std::string assignment;
  std::string origin = "-o";
};

/// Parses YAML text named `source` in messages, then applies the overrides in order.
/// Throws tandem::Error(InvalidArgument) for anything invalid (see the file comment).
Config parse_config(std::string_view yaml_text, std::string_view source,
                    std::span<const Override> overrides = {});
/// Same, reading `file` (Error(Io) when it cannot be read).
Config load_config(const std::filesystem::path& file, std::span<const Override> overrides = {});

/// Every key the configuration accepts, "section.key", in file order.
std::vector<std::string_view> config_keys();

/// The configuration as YAML (every key, effective values), e.g. for a checkpoint's record.
std::string to_yaml(const Config& config);

/// Throws Error(InvalidArgument) naming data.dir, where it was set and what to do when the
/// directory does not exist.
void check_data_dir(const Config& config);

}  // namespace fashion_mnist
