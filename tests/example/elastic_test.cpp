// The main job in an elastic run across two network-namespace hosts (tandemrun --nnodes 1:2):
// node 1's host dies mid-training (its tandemrun SIGKILLed, its worker with it); node 0 goes on
// alone in a new round, resumes from the last checkpoint at world size 1 (the rest of the
// epoch re-sharded, the same global batch in one rank) and finishes with the accuracy of a run
// that was never interrupted.
#include "tools/netns.hpp"
#include "tools/subprocess.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <signal.h>
#include <string>
#include <vector>

namespace tandem::testing {
namespace {

using namespace std::chrono_literals;

const std::string kBinary = TANDEM_BINARY_DIR "/bin/fashion_mnist";
const std::string kDataDir = "/usr/share/datasets/fashion-mnist";
constexpr int kPort = 29460;

// 4096 training images, global batch 64 (64 steps per epoch), 3 epochs, a checkpoint every
// 10 steps.
std::vector<std::string> job_args(const std::string& checkpoints) {
  return {kBinary,
          "-o",
          "data.limit_train=4096",
          "-o",
          "data.limit_test=1024",
          "-o",
          "training.batch_size=64",
          "-o",
          "training.epochs=3",
          "-o",
          "training.warmup_steps=10",
          "-o",
          "log.progress=lines",
          "-o",
          "checkpoint.every_steps=10",
          "-o",
          "checkpoint.dir=" + checkpoints};
}

double final_accuracy(const std::string& out) {
  static const std::regex kFinal(R"(final: test accuracy ([0-9.]+)%)");
  std::smatch m;
  return std::regex_search(out, m, kFinal) ? std::stod(m[1]) : -1;
}

TEST(ExampleElastic, NodeLostMidTrainingLeavesTheOtherToFinishWithTheSameAccuracy) {
  if (!std::filesystem::exists(kDataDir + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST is not installed in " << kDataDir;
  if (auto why = NetnsPair::unavailable()) GTEST_SKIP() << "needs network namespaces: " << *why;
  NetnsPair pair;
  TempDir dir;

  // The reference: one process, never interrupted.
  const auto straight = run_process(job_args(dir.file("straight")), {}, 300s);
  ASSERT_EQ(straight.exit_code, 0) << straight.out << straight.err;
  const double expected = final_accuracy(straight.out);
  ASSERT_GT(expected, 50) << straight.out;

  const auto node = [&](int i) {
    std::vector<std::string> argv{tandemrun_path(),
                                  "--nnodes",
                                  "1:2",
                                  "--node-rank",
                                  std::to_string(i),
                                  "--master-addr",
                                  pair.addr(0),
                                  "--master-port",
                                  std::to_string(kPort),
                                  "--nproc-per-node",
                                  "1",
                                  "--monitor-interval",
                                  "0.2",
                                  "--rdzv-conf",
                                  "last_call_timeout=30"};
    const auto job = job_args(dir.file("elastic"));
    argv.insert(argv.end(), job.begin(), job.end());
    return std::make_unique<Subprocess>(pair.exec_in(i, argv),
                                        std::vector<std::string>{"TANDEM_STORE_TOKEN=elastic-job"});
  };
  auto a = node(0);
  auto b = node(1);
  // Kill node 1 once the first epoch is over (a checkpoint every 10 steps: the latest is at
  // most 9 steps behind).
  ASSERT_TRUE(a->wait_for(
      [](const std::string& out, const std::string&) {
        return out.find("[rank 0]: epoch 1/3:") != std::string::npos;
      },
      300s))
      << a->out() << a->err();
  ASSERT_EQ(::kill(b->pid(), SIGKILL), 0);
  const auto ra = a->wait(300s);
  b->wait(60s);
  ASSERT_FALSE(ra.timed_out) << ra.out << ra.err;
  ASSERT_EQ(ra.exit_code, 0) << ra.out << ra.err;
  EXPECT_NE(ra.err.find("the run goes on with the 1 remaining node(s) in a new round"),
            std::string::npos)
      << ra.err;
  EXPECT_NE(ra.out.find("[rank 0]: fashion_mnist: 2 ranks"), std::string::npos) << ra.out;
  static const std::regex kResumed(
      R"(\[rank 0\]: resumed from \S+ at step (\d+) \(epoch \d\)\n\[rank 0\]:   written at )"
      R"(world size 2 \(global batch 64, 1 accumulation step\(s\)\), resumed at world size 1 )"
      R"(\(global batch 64, 1\): the rest of the epoch is re-sharded)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(ra.out, m, kResumed)) << ra.out;
  EXPECT_GE(std::stoi(m[1]), 60) << "the latest checkpoint once epoch 1 was over";
  EXPECT_NE(ra.out.find("[rank 0]: result: world_size=1 epochs=3 steps=192 global_batch=64 "),
            std::string::npos)
      << ra.out;
  const double got = final_accuracy(ra.out);
  EXPECT_NEAR(got, expected, 3.0) << "elastic run:\n" << ra.out << "\nstraight:\n" << straight.out;
}

}  // namespace
}  // namespace tandem::testing
