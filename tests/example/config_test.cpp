// The Fashion-MNIST example's configuration: every key of the shipped config.yaml, every
// invalid input and its message, -o overrides, batch resolution and the lr schedule.
#include "config.hpp"

#include "setup.hpp"

#include <tandem/error.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fashion_mnist {
namespace {

const std::string kShipped = TANDEM_SOURCE_DIR "/examples/fashion_mnist/config.yaml";

// The message of the tandem::Error that `fn` throws ("" when it throws none).
template <class Fn>
std::string error_of(Fn&& fn, tandem::ErrorCode code = tandem::ErrorCode::InvalidArgument) {
  try {
    fn();
  } catch (const tandem::Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.message();
  }
  ADD_FAILURE() << "no error thrown";
  return {};
}

Config parse(const std::string& yaml, std::vector<std::string> overrides = {}) {
  std::vector<Override> o;
  for (auto& a : overrides) o.push_back({a, "-o " + a});
  return parse_config(yaml, "test.yaml", o);
}

std::string parse_error(const std::string& yaml, std::vector<std::string> overrides = {}) {
  return error_of([&] { parse(yaml, std::move(overrides)); });
}

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

TEST(ExampleConfig, ShippedFileSetsEveryKeyToTheBuiltInDefault) {
  const Config c = load_config(kShipped);
  for (auto key : config_keys()) {
    EXPECT_NE(c.where(key), "default") << key << " is not documented in config.yaml";
  }
  EXPECT_EQ(to_yaml(c), to_yaml(Config{})) << "config.yaml and the defaults of config.hpp disagree";
}

TEST(ExampleConfig, EveryKeyInTheShippedFileHasAComment) {
  std::ifstream in(kShipped);
  std::string line, previous;
  int keys = 0;
  while (std::getline(in, line)) {
    if (line.starts_with("  ") && !line.starts_with("  #") && line.find(':') != std::string::npos) {
      ++keys;
      EXPECT_TRUE(previous.starts_with("  #")) << "no comment above: " << line;
    }
    previous = line;
  }
  EXPECT_EQ(keys, static_cast<int>(config_keys().size()));
}

TEST(ExampleConfig, EmptyTextGivesTheDefaults) {
  EXPECT_EQ(to_yaml(parse("")), to_yaml(Config{}));
}

TEST(ExampleConfig, ValuesAndOriginsAreRead) {
  const Config c = parse(
      "training:\n  epochs: 7\n  lr: 1e-2\n  lr_scaling: sqrt\n"
      "ddp:\n  enabled: off\n  comm_hook: bf16_compress\nlog:\n"
      "  metrics: out/m.json\n");
  EXPECT_EQ(c.training.epochs, 7u);
  EXPECT_DOUBLE_EQ(c.training.lr, 0.01);
  EXPECT_EQ(c.training.lr_scaling, LrScaling::sqrt);
  EXPECT_FALSE(c.ddp.enabled);
  EXPECT_EQ(c.ddp.comm_hook, "bf16_compress");
  EXPECT_EQ(c.log.metrics, "out/m.json");
  EXPECT_EQ(c.where("training.lr"), "test.yaml:3");
  EXPECT_EQ(c.where("training.seed"), "default");
}

TEST(ExampleConfig, OverridesAreTypedLikeTheirKeyAndWinOverTheFile) {
  const Config c = parse("training:\n  epochs: 7\n",
                         {"training.epochs=3", "ddp.gradient_as_bucket_view=true",
                          "training.momentum=0.5", "checkpoint.dir=/tmp/x", "log.progress=lines"});
  EXPECT_EQ(c.training.epochs, 3u);
  EXPECT_TRUE(c.ddp.gradient_as_bucket_view);
  EXPECT_DOUBLE_EQ(c.training.momentum, 0.5);
  EXPECT_EQ(c.checkpoint.dir, "/tmp/x");
  EXPECT_EQ(c.log.progress, ProgressMode::lines);
  EXPECT_EQ(c.where("training.epochs"), "-o training.epochs=3");
  // The last of two overrides of one key wins.
  EXPECT_EQ(parse("", {"training.seed=1", "training.seed=2"}).training.seed, 2u);
  // An empty string value.
  EXPECT_EQ(parse("checkpoint:\n  dir: /a\n", {"checkpoint.dir="}).checkpoint.dir, "");
}

TEST(ExampleConfig, UnknownKeysAreErrorsThatListTheValidOnes) {
  auto e = parse_error("training:\n  epoch: 3\n");
  EXPECT_HAS(e, "test.yaml:2");
  EXPECT_HAS(e, "unknown key 'training.epoch'");
  EXPECT_HAS(e, "valid keys of training are epochs, batch_size,");
  EXPECT_HAS(e, "did you mean training.epochs?");

  e = parse_error("trainig:\n  epochs: 3\n");
  EXPECT_HAS(e, "unknown key 'trainig'");
  EXPECT_HAS(e, "valid sections are data, training, ddp, checkpoint, fault, log");

  e = parse_error("", {"ddp.bucket_cap=5"});
  EXPECT_HAS(e, "-o ddp.bucket_cap=5");
  EXPECT_HAS(e, "did you mean ddp.bucket_cap_mb?");

  e = parse_error("", {"epochs=5"});
  EXPECT_HAS(e, "unknown key 'epochs'");
  EXPECT_HAS(e, "valid sections are");
}

TEST(ExampleConfig, BadTypesNameTheKeyTheSourceAndTheExpectedValues) {
  auto e = parse_error("training:\n  epochs: three\n");
  EXPECT_HAS(e, "test.yaml:2");
  EXPECT_HAS(e, "training.epochs: 'three' is not valid: expected an integer >= 1");

  e = parse_error("", {"training.epochs=0"});
  EXPECT_HAS(e, "-o training.epochs=0");
  EXPECT_HAS(e, "expected an integer >= 1");

  EXPECT_HAS(parse_error("", {"training.batch_size=-4"}), "expected an integer >= 0");
  EXPECT_HAS(parse_error("", {"training.lr=0"}),
             "training.lr: '0' is not valid: expected a "
             "number > 0");
  EXPECT_HAS(parse_error("", {"training.lr=fast"}), "expected a number > 0");
  EXPECT_HAS(parse_error("", {"training.momentum=1"}), "expected a number in [0, 1)");
  EXPECT_HAS(parse_error("", {"ddp.enabled=maybe"}), "expected true or false");
  EXPECT_HAS(parse_error("training:\n  epochs: [1, 2]\n"),
             "a list or mapping is not valid: expected an integer >= 1");
  EXPECT_HAS(parse_error("training:\n  epochs:\n"), "no value given");
  EXPECT_HAS(parse_error("training: 5\n"), "section 'training' must be a mapping");
  EXPECT_HAS(parse_error("- a\n- b\n"), "must be a mapping of sections");
  EXPECT_HAS(parse_error("training:\n  epochs: [1\n"), "not valid YAML");
  EXPECT_HAS(parse_error("", {"training.epochs"}), "expected section.key=value");
}

TEST(ExampleConfig, BadChoicesListTheValidOnes) {
  auto e = parse_error("training:\n  precision: fp16\n");
  EXPECT_HAS(e, "test.yaml:2");
  EXPECT_HAS(e, "training.precision: 'fp16' is not valid: expected one of fp32, bf16");
  EXPECT_HAS(parse_error("", {"training.lr_scaling=cubic"}), "one of linear, sqrt, none");
  EXPECT_HAS(parse_error("", {"ddp.comm_hook=powersgd"}),
             "one of allreduce, fp16_compress, bf16_compress");
  EXPECT_HAS(parse_error("", {"log.progress=fancy"}), "one of auto, bar, lines, none");
  EXPECT_HAS(parse_error("", {"training.device=tpu"}), "one of cpu, cuda");
  EXPECT_HAS(parse_error("", {"log.metrics=m.txt"}), "neither a .csv nor a .json extension");
}

TEST(ExampleConfig, BothBatchKeysAreAnError) {
  const auto e = parse_error("training:\n  batch_size: 128\n", {"training.batch_size_per_rank=64"});
  EXPECT_HAS(e, "training.batch_size (128, set at test.yaml:2)");
  EXPECT_HAS(e, "training.batch_size_per_rank (64, set at -o training.batch_size_per_rank=64)");
  EXPECT_HAS(e, "are both set");
  EXPECT_HAS(e, "-o training.batch_size=0");
  // The way out the message names works.
  const Config c = parse("training:\n  batch_size: 128\n",
                         {"training.batch_size=0", "training.batch_size_per_rank=64"});
  EXPECT_EQ(c.training.batch_size_per_rank, 64u);

  EXPECT_HAS(parse_error("", {"training.batch_size=0"}), "neither training.batch_size");
}

TEST(ExampleConfig, GlobalBatchMustSplitEvenlyAcrossRanks) {
  const Config c = parse("", {"training.batch_size=100"});
  auto e = error_of([&] { resolve_setup(c, 3); });
  EXPECT_HAS(e, "training.batch_size=100 (set at -o training.batch_size=100)");
  EXPECT_HAS(e, "cannot be split evenly across 3 ranks");
  EXPECT_HAS(e, "use a multiple of 3 (99 or 102)");
  e = error_of([&] { resolve_setup(parse("", {"training.batch_size=2"}), 4); });
  EXPECT_HAS(e, "use a multiple of 4 (4)");
  EXPECT_EQ(resolve_setup(c, 4).per_rank_batch, 25u);
  EXPECT_EQ(resolve_setup(c, 1).per_rank_batch, 100u);
}

TEST(ExampleConfig, MissingDataDirectoryIsNamedWithTheWayOut) {
  Config c = parse("", {"data.dir=/nonexistent/fashion"});
  const auto e = error_of([&] { check_data_dir(c); });
  EXPECT_HAS(e, "data.dir");
  EXPECT_HAS(e, "/nonexistent/fashion (set at -o data.dir=/nonexistent/fashion) does not exist");
  EXPECT_HAS(e, "dataset-fashion-mnist");
  EXPECT_HAS(e, "--data DIR");
  c.data.dir = "/";
  EXPECT_NO_THROW(check_data_dir(c));
}

TEST(ExampleConfig, KeysThatAreListsOrMappingsAreErrorsNotCrashes) {
  // YAML allows any node as a key; found by fuzz/fuzz_config (YAML's exception escaped).
  EXPECT_NE(parse_error("? [data, x]: 1\n").find("a key must be a plain name"), std::string::npos);
  EXPECT_NE(parse_error("data:\n  ? {a: 1}: 2\n").find("not a mapping"), std::string::npos);
}

TEST(ExampleConfig, ToYamlReadsBackStringsWithControlCharacters) {
  // A raw newline in a quoted string reads back as a space; found by fuzz/fuzz_config.
  const Config c = parse_config("data:\n  dir: \"a\\nb\\tc\\x7f\"\n", "test.yaml");
  ASSERT_EQ(c.data.dir, "a\nb\tc\x7f");
  EXPECT_EQ(parse_config(to_yaml(c), "dump.yaml").data.dir, c.data.dir);
}

TEST(ExampleConfig, MissingFileIsAnIoError) {
  const auto e = error_of([] { load_config("/nonexistent/c.yaml"); }, tandem::ErrorCode::Io);
  EXPECT_HAS(e, "/nonexistent/c.yaml");
}

TEST(ExampleSetup, GlobalAndPerRankBatchesAndAccumulation) {
  fashion_mnist::Setup s = resolve_setup(parse("", {"training.batch_size=128"}), 2);
  EXPECT_EQ(s.per_rank_batch, 64u);
  EXPECT_EQ(s.global_batch, 128u);
  EXPECT_EQ(s.step_batch, 128u);
  s = resolve_setup(parse("", {"training.batch_size=0", "training.batch_size_per_rank=32",
                               "training.accumulation_steps=4"}),
                    3);
  EXPECT_EQ(s.per_rank_batch, 32u);
  EXPECT_EQ(s.global_batch, 96u);
  EXPECT_EQ(s.step_batch, 384u);
}

TEST(ExampleSetup, LearningRateScaling) {
  EXPECT_DOUBLE_EQ(scale_lr(0.1, 512, 128, LrScaling::linear), 0.4);
  EXPECT_DOUBLE_EQ(scale_lr(0.1, 512, 128, LrScaling::sqrt), 0.2);
  EXPECT_DOUBLE_EQ(scale_lr(0.1, 512, 128, LrScaling::none), 0.1);
  EXPECT_DOUBLE_EQ(scale_lr(0.1, 64, 128, LrScaling::linear), 0.05);
  EXPECT_DOUBLE_EQ(scale_lr(0.1, 32, 128, LrScaling::sqrt), 0.05);

  // The scaled lr follows the images per optimizer step (accumulation included).
  const fashion_mnist::Setup s =
      resolve_setup(parse("", {"training.lr=0.05", "training.reference_batch=64",
                               "training.batch_size=128", "training.accumulation_steps=2"}),
                    2);
  EXPECT_DOUBLE_EQ(s.lr, 0.2);
  EXPECT_EQ(s.lr_rule, "linear: 0.05 x 256/64");
  const fashion_mnist::Setup q =
      resolve_setup(parse("", {"training.lr_scaling=sqrt", "training.reference_batch=32"}), 2);
  EXPECT_DOUBLE_EQ(q.lr, 0.1);
  EXPECT_EQ(q.lr_rule, "sqrt: 0.05 x sqrt(128/32)");
}

TEST(ExampleSetup, WarmupRampsLinearlyThenCosineDecaysToZero) {
  const LrSchedule s{.peak = 0.4, .warmup_steps = 4, .total_steps = 14, .decay = LrDecay::cosine};
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.at(1), 0.2);
  EXPECT_DOUBLE_EQ(s.at(3), 0.4);
  EXPECT_DOUBLE_EQ(s.at(4), 0.4);      // decay starts at the peak
  EXPECT_NEAR(s.at(9), 0.2, 1e-12);    // half way: half the peak
  EXPECT_NEAR(s.at(14), 0.0, 1e-12);   // the end
  EXPECT_NEAR(s.at(100), 0.0, 1e-12);  // and after it
  for (std::uint64_t i = 4; i < 14; ++i) EXPECT_GT(s.at(i), s.at(i + 1));

  const LrSchedule constant{.peak = 0.3, .warmup_steps = 0, .total_steps = 10};
  EXPECT_DOUBLE_EQ(constant.at(0), 0.3);
  EXPECT_DOUBLE_EQ(constant.at(9), 0.3);
  const LrSchedule warm{.peak = 0.3, .warmup_steps = 3, .total_steps = 10};
  EXPECT_DOUBLE_EQ(warm.at(0), 0.1);
  EXPECT_DOUBLE_EQ(warm.at(2), 0.3);
  EXPECT_DOUBLE_EQ(warm.at(9), 0.3);
}

TEST(ExampleSetup, FaultKillsTheChosenRankOnceInTheFirstRoundOnly) {
  EXPECT_FALSE(planned_kill(parse(""), 0, 2, 100, 0).has_value()) << "no fault by default";
  const Config c = parse("fault:\n  kill_rank: 1\n  kill_at_step: 7\n");
  EXPECT_EQ(planned_kill(c, 1, 2, 100, 0), std::optional<std::uint64_t>(7));
  EXPECT_FALSE(planned_kill(c, 0, 2, 100, 0).has_value()) << "another rank";
  EXPECT_FALSE(planned_kill(c, 1, 2, 100, 1).has_value()) << "a restarted round";
  const std::string e = error_of([&] { planned_kill(c, 0, 1, 100, 0); });
  EXPECT_HAS(e, "fault.kill_rank 1 (set at test.yaml:2) is not a rank of this run of 1 rank");

  // random: a step within the run, drawn from fault.seed, the same on every rank.
  const Config r = parse("", {"fault.kill_at_step=random", "fault.seed=5"});
  EXPECT_TRUE(r.fault.kill_at_random);
  EXPECT_HAS(to_yaml(r), "  kill_at_step: random\n");
  std::vector<std::uint64_t> drawn;
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    const Config rs =
        parse("", {"fault.kill_at_step=random", "fault.seed=" + std::to_string(seed)});
    const auto at = planned_kill(rs, 0, 2, 10, 0);
    ASSERT_TRUE(at.has_value());
    EXPECT_GE(*at, 1u);
    EXPECT_LE(*at, 9u);
    EXPECT_EQ(at, planned_kill(rs, 0, 2, 10, 0));
    drawn.push_back(*at);
  }
  EXPECT_GT(std::set<std::uint64_t>(drawn.begin(), drawn.end()).size(), 3u) << "not random";
  EXPECT_EQ(parse("", {"fault.kill_at_step=random", "fault.kill_at_step=3"}).fault.kill_at_step,
            3u);
  EXPECT_HAS(parse_error("", {"fault.kill_at_step=soon"}), "expected an integer >= 0, or random");
}

}  // namespace
}  // namespace fashion_mnist
