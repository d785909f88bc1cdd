// What the Fashion-MNIST example prints and writes: the result line, the step timer, the
// progress bar and lines, and the metrics files.
#include "metrics.hpp"
#include "progress.hpp"
#include "report.hpp"
#include "tools/subprocess.hpp"

#include <tandem/error.hpp>

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace fashion_mnist {
namespace {

TEST(ExampleReport, ResultLineHasTheExactFormat) {
  const RunResult r{.world_size = 2,
                    .epochs = 10,
                    .steps = 4680,
                    .global_batch = 128,
                    .test_accuracy = 91.234,
                    .ms_per_step = 33.456,
                    .images_per_s = 3825.91};
  EXPECT_EQ(format_result_line(r),
            "result: world_size=2 epochs=10 steps=4680 global_batch=128 test_accuracy=91.23 "
            "ms_per_step=33.46 images_per_s=3825.9");
}

TEST(ExampleReport, StepTimerLeavesOutTheFirstSteps) {
  StepTimer t(2);
  EXPECT_EQ(t.mean_ms(), 0.0);
  t.add(1.0);
  EXPECT_DOUBLE_EQ(t.mean_ms(), 1000.0);  // too few: all of them
  t.add(0.5);
  EXPECT_DOUBLE_EQ(t.mean_ms(), 750.0);
  t.add(0.010);
  t.add(0.020);
  EXPECT_DOUBLE_EQ(t.mean_ms(), 15.0);
  EXPECT_EQ(t.count(), 4u);
}

TEST(ExampleReport, SetupDescriptionNamesBatchesLrAndBuckets) {
  Config c;
  c.training.accumulation_steps = 2;
  const fashion_mnist::Setup s{.world_size = 2,
                               .per_rank_batch = 64,
                               .global_batch = 128,
                               .accumulation_steps = 2,
                               .step_batch = 256,
                               .base_lr = 0.05,
                               .lr = 0.1,
                               .lr_rule = "linear: 0.05 x 256/128"};
  const RunFacts f{.train_images = 60000,
                   .test_images = 10000,
                   .steps_per_epoch = 234,
                   .total_steps = 1170,
                   .parameters = 225034,
                   .buckets = "1 bucket (0.86 MiB)",
                   .transport = "shm"};
  const std::string text = describe_setup(c, s, f);
  for (const char* part :
       {"2 ranks over shm", "64 per rank x 2 ranks = 128 global", "x 2 accumulation steps = 256",
        "lr          0.1 (linear: 0.05 x 256/128)", "precision   fp32", "225034 parameters",
        "1 bucket (0.86 MiB)", "10 epochs x 234 steps = 1170"}) {
    EXPECT_NE(text.find(part), std::string::npos) << part << " not in\n" << text;
  }
  c.ddp.enabled = false;
  EXPECT_NE(describe_setup(c, s, f).find("compute-only"), std::string::npos);
}

StepStatus status(std::uint64_t done, std::uint64_t of) {
  return {.epoch = 2,
          .epochs = 5,
          .step_in_epoch = done,
          .steps_in_epoch = of,
          .step = 100 + done,
          .total_steps = 500,
          .loss = 0.43219,
          .lr = 0.05,
          .images_per_s = 3999.6,
          .eta_s = 83};
}

TEST(ExampleProgress, BarAndLineFormats) {
  EXPECT_EQ(format_duration(5), "0:05");
  EXPECT_EQ(format_duration(83), "1:23");
  EXPECT_EQ(format_duration(3723), "1:02:03");
  EXPECT_EQ(format_bar(status(50, 100), 10),
            "epoch 2/5 [=====>    ] 50/100 loss 0.4322 4000 img/s ETA 1:23");
  EXPECT_EQ(format_bar(status(100, 100), 4),
            "epoch 2/5 [====] 100/100 loss 0.4322 4000 img/s "
            "ETA 1:23");
  EXPECT_EQ(format_line(status(50, 100)),
            "epoch 2/5 step 50/100 (total 150/500) loss 0.4322 lr 0.05000 4000 img/s ETA 1:23");
}

std::string progress_output(ProgressMode mode, std::uint64_t every, std::uint64_t steps) {
  std::FILE* f = std::tmpfile();
  {
    Progress p(mode, every, f);
    for (std::uint64_t i = 1; i <= steps; ++i) {
      StepStatus s = status(i, steps);
      s.step = i;
      p.update(s);
    }
  }
  std::rewind(f);
  std::string out;
  for (int ch; (ch = std::fgetc(f)) != EOF;) out += static_cast<char>(ch);
  std::fclose(f);
  return out;
}

TEST(ExampleProgress, LinesEveryNStepsAndAtTheEpochEnd) {
  const auto out = progress_output(ProgressMode::lines, 4, 10);
  const auto lines = tandem::testing::split_lines(out);
  ASSERT_EQ(lines.size(), 3u) << out;
  EXPECT_TRUE(lines[0].starts_with("epoch 2/5 step 4/10")) << lines[0];
  EXPECT_TRUE(lines[1].starts_with("epoch 2/5 step 8/10")) << lines[1];
  EXPECT_TRUE(lines[2].starts_with("epoch 2/5 step 10/10")) << lines[2];
  // A file is not a terminal: auto prints lines.
  EXPECT_EQ(progress_output(ProgressMode::auto_detect, 4, 10), out);
  EXPECT_EQ(progress_output(ProgressMode::none, 4, 10), "");
}

TEST(ExampleProgress, BarRedrawsInPlaceAndEndsItsLine) {
  const auto out = progress_output(ProgressMode::bar, 4, 3);
  EXPECT_TRUE(out.starts_with("\repoch 2/5 [")) << out;
  EXPECT_NE(out.find("3/3 loss"), std::string::npos) << out;
  EXPECT_TRUE(out.ends_with("\n")) << out;
  EXPECT_EQ(out.find('\n'), out.size() - 1) << "one line only";
}

MetricsRow row(std::uint64_t epoch, std::uint64_t step, const char* kind = "epoch") {
  return {.kind = kind,
          .epoch = epoch,
          .step = step,
          .train_loss = 0.5 / static_cast<double>(epoch),
          .train_accuracy = 80.0 + static_cast<double>(epoch),
          .test_loss = 0.25,
          .test_accuracy = 85.5,
          .ms_per_step = 33.25,
          .images_per_s = 3850.5,
          .lr = 0.05};
}

TEST(ExampleMetrics, CsvAndJsonRoundTripAndResumeKeepsEarlierEpochs) {
  tandem::testing::TempDir dir;
  for (const char* name : {"m.csv", "sub/m.json"}) {
    const std::string path = dir.file(name);
    {
      MetricsWriter w(path);
      w.write(row(1, 10));
      w.write(row(2, 20));
      w.write(row(2, 20, "final"));
    }
    const auto rows = read_metrics(path);
    ASSERT_EQ(rows.size(), 3u) << name;
    EXPECT_EQ(rows[0], row(1, 10)) << name;
    EXPECT_EQ(rows[2], row(2, 20, "final")) << name;
    {
      // Resumed from the checkpoint after epoch 1: its row stays, the rest is written again.
      MetricsWriter w(path, 1);
      EXPECT_EQ(w.rows().size(), 1u);
      w.write(row(2, 20));
    }
    const auto resumed = read_metrics(path);
    ASSERT_EQ(resumed.size(), 2u) << name;
    EXPECT_EQ(resumed[1], row(2, 20)) << name;
    {
      MetricsWriter fresh(path);  // not resumed: starts over
      EXPECT_TRUE(fresh.rows().empty());
    }
  }
  std::ifstream csv(dir.file("m.csv"));
  std::string header;
  std::getline(csv, header);
  EXPECT_EQ(header, metrics_csv_header());
  std::ofstream(dir.file("bad.csv")) << "not,a,metrics,file\n";
  EXPECT_THROW(read_metrics(dir.file("bad.csv")), tandem::Error);
}

}  // namespace
}  // namespace fashion_mnist
