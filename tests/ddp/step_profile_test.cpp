// StepProfiler ("why isn't it faster?") on a real Reducer and communicator: a deliberately slow
// rank is named the slowest and the others' wait is counted as waiting for it, a deliberately
// slow loader is the bottleneck, and every rank gets the same report. The slowness is a sleep
// of 100 ms and the model is tiny (its allreduce takes microseconds, a few milliseconds under
// a sanitizer), so the verdict does not depend on the machine's speed.

#include "ddp_util.hpp"

#include <tandem/step_profile.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace tandem::ddptest {
namespace {

using namespace std::chrono_literals;

// `steps` synchronised passes of a two-parameter model; `data` and `compute` sleep per step.
ddp::StepReport profile(const testing::RankContext& ctx, int steps, std::chrono::milliseconds data,
                        std::chrono::milliseconds compute) {
  auto comm = connect(ctx);
  FakeModel m({{DataType::f32, 256}, {DataType::f32, 16}});
  ddp::Reducer r(comm, m.views());
  ddp::StepProfiler prof(&r);
  for (int t = 0; t < steps; ++t) {
    prof.begin_step();
    {
      auto timed = prof.time(ddp::StepPart::data);
      std::this_thread::sleep_for(data);
    }
    {
      auto timed = prof.time(ddp::StepPart::compute);
      std::this_thread::sleep_for(compute);
      backward_pass(r, m, ctx.rank, t);  // finalize inside the scope, as LibTorch's DDP does
    }
    prof.end_step();
  }
  EXPECT_EQ(prof.steps(), static_cast<std::uint64_t>(steps));
  return prof.report(*comm);
}

TEST(StepProfiler, ASlowRankIsNamedAndTheOthersWaitForIt) {
  testing::expect_all_ok(testing::run_ranks(
      3,
      [](const testing::RankContext& ctx) {
        const auto report = profile(ctx, 6, 0ms, ctx.rank == 2 ? 100ms : 0ms);
        EXPECT_EQ(report.steps, 6u);
        ASSERT_EQ(report.ranks.size(), 3u);
        EXPECT_EQ(report.slowest_rank, 2);
        EXPECT_EQ(report.cause, "slowest_rank") << report.text();
        EXPECT_NE(report.verdict.find("Rank 2 is the slowest"), std::string::npos)
            << report.verdict;
        // Ranks 0 and 1 spent the slow rank's extra time waiting in finalize_backward, and
        // that wait is not compute (it happened inside the compute scope).
        for (int r : {0, 1}) {
          const auto& b = report.ranks[static_cast<std::size_t>(r)];
          EXPECT_GT(b.waiting_ms, 70.0) << report.text();
          EXPECT_LT(b.compute_ms, 50.0) << report.text();
        }
        EXPECT_GT(report.ranks[2].compute_ms, 95.0) << report.text();
        EXPECT_LT(report.ranks[2].waiting_ms, 30.0) << report.text();
        EXPECT_NE(report.text().find("(slowest)"), std::string::npos);
      },
      run_options()));
}

TEST(StepProfiler, ASlowLoaderIsTheBottleneckOnEveryRank) {
  testing::expect_all_ok(testing::run_ranks(
      2,
      [](const testing::RankContext& ctx) {
        const auto report = profile(ctx, 5, 100ms, 0ms);
        EXPECT_EQ(report.cause, "data_loader") << report.text();
        EXPECT_NE(report.verdict.find("The data loader is the bottleneck"), std::string::npos)
            << report.verdict;
        for (const auto& b : report.ranks) EXPECT_GT(b.data_ms, 95.0) << report.text();
      },
      run_options()));
}

}  // namespace
}  // namespace tandem::ddptest
