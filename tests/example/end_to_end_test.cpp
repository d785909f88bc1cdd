// build/bin/fashion_mnist end to end, on a small part of Fashion-MNIST: two ranks under
// tandemrun finish and print the result line; one rank and two ranks with the same global
// batch train the same model (DDP equivalence); a run stopped and resumed from its checkpoint
// equals a straight run; a rank SIGKILLed mid-run under tandemrun --max-restarts 1 is restarted
// and the run resumes to the straight run's result; under training.on_rank_loss=continue the
// survivors of a SIGKILLed rank go on without it; errors in the command line are clear.
#include "tools/subprocess.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <vector>

namespace tandem::testing {
namespace {

const std::string kBinary = TANDEM_BINARY_DIR "/bin/fashion_mnist";
const std::string kDataDir = "/usr/share/datasets/fashion-mnist";

struct ExampleRun {
  ProcessResult process;
  std::string result_line;  // the last line of rank 0, without tandemrun's prefix
  // From the "final:" line.
  double accuracy = -1, test_loss = -1, param_sum = 0, param_sq = 0;
  std::string digest;  // the final line's numbers as printed
};

// Small, fast settings every run shares: 1024 training and 512 test images.
std::vector<std::string> small_args(std::vector<std::string> extra) {
  std::vector<std::string> args = {"-o", "data.limit_train=1024", "-o", "data.limit_test=512",
                                   "-o", "log.progress=lines",    "-o", "training.warmup_steps=4",
                                   "-o", "training.epochs=1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// small_args over 2 epochs of 16 steps (global batch 64), a checkpoint every 5 steps.
std::vector<std::string> two_epochs(std::vector<std::string> extra) {
  std::vector<std::string> args = {"-o", "training.batch_size=64",  "-o", "training.epochs=2",
                                   "-o", "checkpoint.every_steps=5"};
  args.insert(args.end(), extra.begin(), extra.end());
  return small_args(std::move(args));
}

// `launcher`: more tandemrun options.
ExampleRun run_example(int ranks, const std::vector<std::string>& args,
                       const std::vector<std::string>& launcher = {}) {
  std::vector<std::string> argv;
  if (ranks > 0) argv = {tandemrun_path(), "--nproc-per-node", std::to_string(ranks)};
  argv.insert(argv.end(), launcher.begin(), launcher.end());
  argv.push_back(kBinary);
  argv.insert(argv.end(), args.begin(), args.end());
  ExampleRun r;
  r.process = run_process(argv, {}, std::chrono::seconds(120));
  const std::string prefix = ranks > 0 ? "[rank 0]: " : "";
  std::string last;
  static const std::regex final_re(
      R"(final: test accuracy ([0-9.]+)% \(\d+/\d+\), test loss ([0-9.]+), parameters sum )"
      R"((\S+) sumsq (\S+))");
  for (const auto& line : split_lines(r.process.out)) {
    if (!line.starts_with(prefix)) continue;
    last = line.substr(prefix.size());
    std::smatch m;
    if (std::regex_match(last, m, final_re)) {
      r.accuracy = std::stod(m[1]);
      r.test_loss = std::stod(m[2]);
      r.param_sum = std::stod(m[3]);
      r.param_sq = std::stod(m[4]);
      r.digest = fmt::format("{} {} {}", m[2].str(), m[3].str(), m[4].str());
    }
  }
  r.result_line = last;
  return r;
}

std::string describe(const ExampleRun& r) {
  return fmt::format("exit {} signal {}{}\n--- stdout\n{}\n--- stderr\n{}", r.process.exit_code,
                     r.process.signal, r.process.timed_out ? " (timed out)" : "", r.process.out,
                     r.process.err);
}

bool have_data() {
  return std::filesystem::exists(kDataDir + "/train-images-idx3-ubyte.gz");
}

#define REQUIRE_DATA()                                             \
  if (!have_data())                                                \
  GTEST_SKIP() << "Fashion-MNIST is not installed in " << kDataDir \
               << " (apt-get install dataset-fashion-mnist)"

TEST(ExampleEndToEnd, TwoRanksFinishAndPrintTheResultLineLast) {
  REQUIRE_DATA();
  TempDir dir;
  const std::string metrics = dir.file("metrics.csv");
  const ExampleRun r =
      run_example(2, small_args({"-o", "training.batch_size=64", "--metrics", metrics}));
  ASSERT_EQ(r.process.exit_code, 0) << describe(r);
  static const std::regex result_re(
      R"(result: world_size=2 epochs=1 steps=16 global_batch=64 test_accuracy=\d+\.\d\d )"
      R"(ms_per_step=\d+\.\d\d images_per_s=\d+\.\d)");
  EXPECT_TRUE(std::regex_match(r.result_line, result_re)) << describe(r);
  // Rank 0 alone reports: the setup once, an evaluation of 512 images summed over both ranks.
  EXPECT_NE(r.process.out.find("[rank 0]: fashion_mnist: 2 ranks"), std::string::npos);
  EXPECT_NE(r.process.out.find("32 per rank x 2 ranks = 64 global"), std::string::npos);
  EXPECT_NE(r.process.out.find("/512) | "), std::string::npos) << describe(r);
  EXPECT_EQ(r.process.out.find("[rank 1]: "), std::string::npos) << describe(r);
  // A model that learned something: 10 classes, chance is 10 %.
  EXPECT_GT(r.accuracy, 40.0) << describe(r);
  const auto rows = split_lines(run_process({"/bin/cat", metrics}).out);
  ASSERT_EQ(rows.size(), 3u) << "header, epoch 1, final";
  EXPECT_TRUE(rows[1].starts_with("epoch,1,16,")) << rows[1];
  EXPECT_TRUE(rows[2].starts_with("final,1,16,")) << rows[2];
}

// Same samples in every optimizer step, gradients summed in another order: equal up to
// rounding (about 1e-7 here).
void expect_same_model(const ExampleRun& a, const ExampleRun& b) {
  ASSERT_GT(a.test_loss, 0) << describe(a);
  ASSERT_GT(b.test_loss, 0) << describe(b);
  EXPECT_NEAR(b.test_loss, a.test_loss, 1e-4 * a.test_loss) << describe(b);
  EXPECT_NEAR(b.accuracy, a.accuracy, 0.5) << describe(b);
  EXPECT_NEAR(b.param_sum, a.param_sum, 1e-5 * (std::abs(a.param_sum) + a.param_sq)) << describe(b);
  EXPECT_NEAR(b.param_sq, a.param_sq, 1e-5 * a.param_sq) << describe(b);
}

TEST(ExampleEndToEnd, OneRankAndTwoRanksWithTheSameGlobalBatchTrainTheSameModel) {
  REQUIRE_DATA();
  const ExampleRun one = run_example(0, small_args({"-o", "training.batch_size=64"}));
  ASSERT_EQ(one.process.exit_code, 0) << describe(one);  // no launcher: world size 1
  EXPECT_NE(one.result_line.find("result: world_size=1 epochs=1 steps=16 global_batch=64"),
            std::string::npos)
      << describe(one);
  // Two ranks of 32.
  const ExampleRun two = run_example(2, small_args({"-o", "training.batch_size=64"}));
  ASSERT_EQ(two.process.exit_code, 0) << describe(two);
  EXPECT_NE(two.result_line.find("world_size=2 epochs=1 steps=16 global_batch=64"),
            std::string::npos)
      << describe(two);
  expect_same_model(one, two);
  // Two ranks of 16, each passing twice (no_sync) before the optimizer step.
  const ExampleRun accumulated = run_example(
      2, small_args({"-o", "training.batch_size=32", "-o", "training.accumulation_steps=2"}));
  ASSERT_EQ(accumulated.process.exit_code, 0) << describe(accumulated);
  EXPECT_NE(accumulated.result_line.find("world_size=2 epochs=1 steps=16 global_batch=64"),
            std::string::npos)
      << describe(accumulated);
  expect_same_model(one, accumulated);
}

// training.precision: bf16 runs the forward passes under LibTorch's CPU autocast in bfloat16
// and reaches fp32's accuracy (4,096 training images, 64 steps of 64), with and without the
// GradScaler.
TEST(ExampleEndToEnd, Bf16AutocastReachesTheAccuracyOfFp32) {
  const std::vector<std::string> args{"-o", "data.limit_train=4096", "-o", "data.limit_test=1024",
                                      "-o", "training.batch_size=64"};
  std::vector<std::string> bf16_args = args;
  bf16_args.insert(bf16_args.end(), {"-o", "training.precision=bf16"});
  const ExampleRun fp32 = run_example(2, small_args(args));
  const ExampleRun bf16 = run_example(2, small_args(bf16_args));
  ASSERT_EQ(fp32.process.exit_code, 0) << describe(fp32);
  ASSERT_EQ(bf16.process.exit_code, 0) << describe(bf16);
  EXPECT_NE(bf16.process.out.find("precision   bf16"), std::string::npos) << describe(bf16);
  EXPECT_NE(fp32.process.out.find("precision   fp32"), std::string::npos) << describe(fp32);
  EXPECT_GT(fp32.accuracy, 60.0) << describe(fp32);
  EXPECT_NEAR(bf16.accuracy, fp32.accuracy, 2.0) << describe(bf16);
  EXPECT_NE(bf16.digest, fp32.digest) << "bf16 computed exactly what fp32 did: autocast was off";
  // With the GradScaler too (dynamic loss scaling, agreed across the ranks).
  bf16_args.insert(bf16_args.end(), {"-o", "training.grad_scaler=true"});
  const ExampleRun scaled = run_example(2, small_args(bf16_args));
  ASSERT_EQ(scaled.process.exit_code, 0) << describe(scaled);
  EXPECT_NEAR(scaled.accuracy, fp32.accuracy, 2.0) << describe(scaled);
}

// training.device=cuda (--device cuda): on a GPU, 2 ranks reach the accuracy of the same run
// on the CPU (they share the GPU when there is one); without one, every rank says so and what
// to do, and exits.
TEST(ExampleEndToEnd, CudaDeviceTrainsLikeTheCpuOrSaysThereIsNoGpu) {
  const std::vector<std::string> args{"-o", "data.limit_train=4096", "-o", "data.limit_test=1024",
                                      "-o", "training.batch_size=64"};
  std::vector<std::string> cuda_args = args;
  cuda_args.insert(cuda_args.end(), {"--device", "cuda"});
  const ExampleRun cuda = run_example(2, small_args(cuda_args));
  if (!std::filesystem::exists("/dev/nvidiactl")) {
    EXPECT_EQ(cuda.process.exit_code, 1) << describe(cuda);
    EXPECT_NE(cuda.process.err.find("training.device is cuda (set at --device) but LibTorch sees "
                                    "no GPU"),
              std::string::npos)
        << describe(cuda);
    EXPECT_NE(cuda.process.err.find("or use training.device=cpu"), std::string::npos);
    return;
  }
  const ExampleRun cpu = run_example(2, small_args(args));
  ASSERT_EQ(cpu.process.exit_code, 0) << describe(cpu);
  ASSERT_EQ(cuda.process.exit_code, 0) << describe(cuda);
  EXPECT_NE(cuda.process.out.find("device      cuda:0"), std::string::npos) << describe(cuda);
  EXPECT_GT(cpu.accuracy, 60.0) << describe(cpu);
  EXPECT_NEAR(cuda.accuracy, cpu.accuracy, 2.0) << describe(cuda);
}

// The run says where a step's time went and why it is not faster: a deliberately slow loader
// (40 ms per batch, twice a step's compute here) and a deliberately slow rank (40 ms more per
// step) are named, with what to try; a plain run is compute-bound.
TEST(ExampleEndToEnd, TheStepBreakdownNamesASlowLoaderAndASlowRank) {
  const auto verdict = [](const ExampleRun& r) {
    const auto at = r.process.out.find("where a step's time went");
    return at == std::string::npos ? std::string() : r.process.out.substr(at);
  };
  const ExampleRun loader =
      run_example(2, small_args({"-o", "training.batch_size=64", "-o", "fault.slow_data_ms=40"}));
  ASSERT_EQ(loader.process.exit_code, 0) << describe(loader);
  EXPECT_NE(verdict(loader).find("The data loader is the bottleneck"), std::string::npos)
      << verdict(loader);
  const ExampleRun rank =
      run_example(2, small_args({"-o", "training.batch_size=64", "-o", "fault.slow_rank=1", "-o",
                                 "fault.slow_rank_ms=40"}));
  ASSERT_EQ(rank.process.exit_code, 0) << describe(rank);
  EXPECT_NE(verdict(rank).find("Rank 1 is the slowest"), std::string::npos) << verdict(rank);
  // The breakdown comes before the final lines, and the result line stays last.
  EXPECT_NE(rank.result_line.find("result: world_size=2"), std::string::npos) << describe(rank);
  // Every 8 steps too, when asked.
  const ExampleRun periodic = run_example(
      2, small_args({"-o", "training.batch_size=64", "-o", "log.breakdown_every_steps=8"}));
  ASSERT_EQ(periodic.process.exit_code, 0) << describe(periodic);
  EXPECT_NE(periodic.process.out.find("step 8: where a step's time went"), std::string::npos)
      << periodic.process.out;
  EXPECT_NE(periodic.process.out.find("step 16: where a step's time went"), std::string::npos)
      << periodic.process.out;
}

TEST(ExampleEndToEnd, StoppedAndResumedRunEqualsAStraightRun) {
  REQUIRE_DATA();
  TempDir dir;
  // 16 steps per epoch; 2 epochs. The first run stops at step 12 (mid-epoch), the second
  // resumes there and crosses the epoch boundary to step 24.
  const ExampleRun straight = run_example(
      2, two_epochs({"-o", "training.max_steps=24", "-o", "checkpoint.dir=" + dir.file("a")}));
  ASSERT_EQ(straight.process.exit_code, 0) << describe(straight);
  const std::string ckpt = "checkpoint.dir=" + dir.file("b");
  const ExampleRun first = run_example(2, two_epochs({"-o", "training.max_steps=12", "-o", ckpt}));
  ASSERT_EQ(first.process.exit_code, 0) << describe(first);
  EXPECT_NE(first.result_line.find("steps=12 "), std::string::npos) << describe(first);
  const ExampleRun second = run_example(2, two_epochs({"-o", "training.max_steps=24", "-o", ckpt}));
  ASSERT_EQ(second.process.exit_code, 0) << describe(second);
  EXPECT_NE(second.process.out.find("resumed from"), std::string::npos) << describe(second);
  EXPECT_NE(second.result_line.find("epochs=2 steps=24 "), std::string::npos) << describe(second);
  ASSERT_FALSE(straight.digest.empty()) << describe(straight);
  EXPECT_EQ(second.digest, straight.digest) << "resumed:\n"
                                            << describe(second) << "\nstraight:\n"
                                            << describe(straight);
  EXPECT_NE(first.digest, straight.digest);
}

// Elastic resume: rank 1 SIGKILLs itself after step 13 of 32 (checkpoints every 5 steps) in the
// first round; tandemrun reports it and restarts both workers, which resume from step 10 and
// finish with the uninterrupted run's model (the resume is exact: same digest).
TEST(ExampleEndToEnd, RankKilledMidRunIsRestartedAndResumesToTheUninterruptedResult) {
  REQUIRE_DATA();
  TempDir dir;
  const ExampleRun straight = run_example(2, two_epochs({"-o", "checkpoint.dir=" + dir.file("a")}));
  ASSERT_EQ(straight.process.exit_code, 0) << describe(straight);
  const std::string ckpt = dir.file("b");
  const ExampleRun killed =
      run_example(2,
                  two_epochs({"-o", "checkpoint.dir=" + ckpt, "-o", "fault.kill_rank=1", "-o",
                              "fault.kill_at_step=13"}),
                  {"--max-restarts", "1"});
  ASSERT_EQ(killed.process.exit_code, 0) << describe(killed);
  const std::string& err = killed.process.err;
  EXPECT_NE(err.find("[rank 1]: fashion_mnist: rank 1: fault.kill_at_step: killing this rank "
                     "with SIGKILL after step 13"),
            std::string::npos)
      << describe(killed);
  static const std::regex restart_re(
      R"(tandemrun: rank 1 \(pid \d+\) was killed by SIGKILL \(9[^)]*\): restarting all 2 )"
      R"(worker\(s\) \(restart 1 of 1\))");
  EXPECT_TRUE(std::regex_search(err, restart_re)) << describe(killed);
  // Once: the restarted round runs to the end.
  const auto resumed = killed.process.out.find("[rank 0]: resumed from ");
  EXPECT_NE(resumed, std::string::npos) << describe(killed);
  EXPECT_EQ(killed.process.out.find("[rank 0]: resumed from ", resumed + 1), std::string::npos)
      << describe(killed);
  static const std::regex at_re(R"(\[rank 0\]: resumed from (\S+) at step (\d+) \(epoch 1\))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(killed.process.out, m, at_re)) << describe(killed);
  EXPECT_EQ(m[1].str(), ckpt);
  EXPECT_EQ(std::stoi(m[2].str()), 10) << "the latest checkpoint before step 13";
  EXPECT_NE(killed.result_line.find("result: world_size=2 epochs=2 steps=32 "), std::string::npos)
      << describe(killed);
  ASSERT_GT(straight.accuracy, 0) << describe(straight);
  EXPECT_NEAR(killed.accuracy, straight.accuracy, 0.3) << describe(killed);
  EXPECT_EQ(killed.digest, straight.digest) << "resumed:\n"
                                            << describe(killed) << "\nstraight:\n"
                                            << describe(straight);
}

// training.on_rank_loss=continue under tandemrun --on-worker-loss continue: rank 1 of 3 is
// SIGKILLed after step 5 (global batch 96, 32 per rank: 10 steps an epoch of 1024 images);
// ranks 0 and 2 shrink to a world of 2, re-shard the rest of the epoch (544 images: 5 steps of
// 96, 48 per rank) and finish both epochs, with no restart and no checkpoint read.
TEST(ExampleEndToEnd, SurvivorsOfAKilledRankGoOnWithoutIt) {
  REQUIRE_DATA();
  const ExampleRun r =
      run_example(3,
                  small_args({"-o", "training.batch_size=96", "-o", "training.epochs=2", "-o",
                              "training.on_rank_loss=continue", "-o", "fault.kill_rank=1", "-o",
                              "fault.kill_at_step=5"}),
                  {"--on-worker-loss", "continue"});
  ASSERT_EQ(r.process.exit_code, 0) << describe(r);
  const std::string& out = r.process.out;
  const std::string& err = r.process.err;
  EXPECT_NE(err.find("[rank 1]: fashion_mnist: rank 1: fault.kill_at_step: killing this rank "
                     "with SIGKILL after step 5"),
            std::string::npos)
      << describe(r);
  static const std::regex going_on_re(
      R"(tandemrun: rank 1 \(pid \d+\) was killed by SIGKILL \(9[^)]*\): the other 2 )"
      R"(worker\(s\) go on without it \(--on-worker-loss continue\))");
  EXPECT_TRUE(std::regex_search(err, going_on_re)) << describe(r);
  static const std::regex shrunk_re(
      R"(\[rank 0\]: lost rank 1 of 3: going on with 2 ranks \(rank 0 is now 0\) from step 5, )"
      R"(global batch 96, lr [0-9.]+ \(linear: 0.05 x 96/128\); recovered in \d+ ms)");
  EXPECT_TRUE(std::regex_search(out, shrunk_re)) << describe(r);
  EXPECT_EQ(out.find("restarting"), std::string::npos) << describe(r);
  EXPECT_EQ(err.find("restarting"), std::string::npos) << describe(r);
  // Epoch 1: 5 steps on 3 ranks, 5 on 2; epoch 2: 10 on 2.
  EXPECT_NE(r.result_line.find("result: world_size=2 epochs=2 steps=20 global_batch=96 "),
            std::string::npos)
      << describe(r);
  EXPECT_NE(r.result_line.find(" ranks_lost=1 ranks_gained=0"), std::string::npos) << describe(r);
  EXPECT_GT(r.accuracy, 50.0) << describe(r);
}

// Rank 0's "(total N/M) loss L lr R" of each step, by N.
std::map<int, std::string> step_losses(const std::string& out) {
  static const std::regex line_re(
      R"(^\[rank 0\]: epoch \d+/\d+ step \d+/\d+ \(total (\d+)/\d+\) (loss \S+ lr \S+) )");
  std::map<int, std::string> losses;
  for (const auto& line : split_lines(out)) {
    std::smatch m;
    if (std::regex_search(line, m, line_re)) losses[std::stoi(m[1])] = m[2];
  }
  return losses;
}

// What the survivors of a loss compute is what a run given the same world sizes computes: 3
// ranks for 5 steps, then 2. The reference stops after step 5, saving a checkpoint, and
// resumes from it on 2 ranks (the elastic path); the run under continue loses rank 1 after
// step 5 and goes on with ranks 0 and 2 from memory. Every later step has the same loss and
// learning rate, and the final model is the same.
TEST(ExampleEndToEnd, AfterALossTheRunEqualsOneGivenTheSameWorldSizes) {
  REQUIRE_DATA();
  TempDir dir;
  const auto args = [](std::vector<std::string> extra) {
    extra.insert(extra.begin(), {"-o", "training.batch_size=96", "-o", "training.epochs=2", "-o",
                                 "log.every_steps=1"});
    return small_args(std::move(extra));
  };
  const std::string ckpt = "checkpoint.dir=" + dir.file("reference");
  const ExampleRun first = run_example(3, args({"-o", "training.max_steps=5", "-o", ckpt}));
  ASSERT_EQ(first.process.exit_code, 0) << describe(first);
  const ExampleRun reference = run_example(2, args({"-o", ckpt}));
  ASSERT_EQ(reference.process.exit_code, 0) << describe(reference);
  EXPECT_NE(reference.process.out.find("resumed from"), std::string::npos) << describe(reference);
  const ExampleRun lost = run_example(3,
                                      args({"-o", "training.on_rank_loss=continue", "-o",
                                            "fault.kill_rank=1", "-o", "fault.kill_at_step=5"}),
                                      {"--on-worker-loss", "continue"});
  ASSERT_EQ(lost.process.exit_code, 0) << describe(lost);
  EXPECT_NE(lost.result_line.find(" ranks_lost=1 ranks_gained=0"), std::string::npos)
      << describe(lost);

  auto after = [](std::map<int, std::string> losses) {
    std::erase_if(losses, [](const auto& kv) { return kv.first <= 5; });
    return losses;
  };
  const auto want = after(step_losses(reference.process.out));
  EXPECT_EQ(want.size(), 15u) << describe(reference);
  EXPECT_EQ(after(step_losses(lost.process.out)), want) << "under continue:\n"
                                                        << describe(lost) << "\nreference:\n"
                                                        << describe(reference);
  ASSERT_FALSE(reference.digest.empty()) << describe(reference);
  EXPECT_EQ(lost.digest, reference.digest);
}

// The same loss with --max-replacements 1: tandemrun starts a new worker, which joins the
// two survivors at their next step (they wait up to 60 s for it), takes the model from rank 0,
// and the run ends on 3 ranks.
TEST(ExampleEndToEnd, AReplacementJoinsTheSurvivorsAndTheRunEndsAtFullSize) {
  REQUIRE_DATA();
  const ExampleRun r = run_example(
      3,
      small_args({"-o", "training.batch_size=96", "-o", "training.epochs=2", "-o",
                  "training.on_rank_loss=continue", "-o", "training.replacement_wait_s=60", "-o",
                  "fault.kill_rank=1", "-o", "fault.kill_at_step=5"}),
      {"--on-worker-loss", "continue", "--max-replacements", "1"});
  ASSERT_EQ(r.process.exit_code, 0) << describe(r);
  const std::string& out = r.process.out;
  const std::string& err = r.process.err;
  static const std::regex replaced_re(
      R"(tandemrun: rank 1 \(pid \d+\) was killed by SIGKILL \(9[^)]*\): the other 2 )"
      R"(worker\(s\) go on without it; a new worker starts to join them in its place )"
      R"(\(--on-worker-loss continue, replacement 1 of 1\))");
  EXPECT_TRUE(std::regex_search(err, replaced_re)) << describe(r);
  EXPECT_NE(out.find("[rank 0]: lost rank 1 of 3: going on with 2 ranks"), std::string::npos)
      << describe(r);
  static const std::regex gained_re(
      R"(\[rank 0\]: gained rank 2 \(a replacement\): going on with 3 ranks from step 5, )"
      R"(global batch 96, lr [0-9.]+ \(linear: 0.05 x 96/128\); admitted in \d+ ms)");
  EXPECT_TRUE(std::regex_search(out, gained_re)) << describe(r);
  // Epoch 1: 5 steps on 3 ranks, 5 on 3 again; epoch 2: 10 on 3.
  EXPECT_NE(r.result_line.find("result: world_size=3 epochs=2 steps=20 global_batch=96 "),
            std::string::npos)
      << describe(r);
  EXPECT_NE(r.result_line.find(" ranks_lost=1 ranks_gained=1"), std::string::npos) << describe(r);
  EXPECT_GT(r.accuracy, 50.0) << describe(r);
}

TEST(ExampleEndToEnd, MissingDataDirectoryIsAClearError) {
  const ExampleRun r = run_example(2, {"--data", "/nonexistent/fmnist"});
  EXPECT_EQ(r.process.exit_code, 2) << describe(r);
  EXPECT_NE(r.process.err.find("/nonexistent/fmnist (set at --data) does not exist"),
            std::string::npos)
      << describe(r);
  EXPECT_NE(r.process.err.find("dataset-fashion-mnist"), std::string::npos);
  // Every rank says it (a launcher may stop the others as soon as one has exited).
  EXPECT_NE(r.process.err.find("]: fashion_mnist: error: data.dir"), std::string::npos)
      << describe(r);
}

TEST(ExampleEndToEnd, BadOptionsAreClearErrors) {
  ExampleRun r = run_example(0, {"-o", "training.epoch=3"});
  EXPECT_EQ(r.process.exit_code, 2) << describe(r);
  EXPECT_NE(r.process.err.find("unknown key 'training.epoch'"), std::string::npos) << describe(r);
  EXPECT_NE(r.process.err.find("did you mean training.epochs?"), std::string::npos);

  r = run_example(0, {"--config", "/nonexistent/c.yaml"});
  EXPECT_EQ(r.process.exit_code, 2) << describe(r);
  EXPECT_NE(r.process.err.find("cannot read the configuration file /nonexistent/c.yaml"),
            std::string::npos)
      << describe(r);

  // The global batch must split across the ranks (checked before any data is read).
  r = run_example(2, {"-o", "training.batch_size=65", "--data", "/"});
  EXPECT_NE(r.process.exit_code, 0);
  EXPECT_NE(r.process.err.find("use a multiple of 2 (64 or 66)"), std::string::npos) << describe(r);

  r = run_example(0, {"--print-config", "-o", "training.epochs=3"});
  EXPECT_EQ(r.process.exit_code, 0) << describe(r);
  EXPECT_NE(r.process.out.find("  epochs: 3\n"), std::string::npos) << describe(r);
}

}  // namespace
}  // namespace tandem::testing
