// The Reducer on the timeline (TANDEM_TRACE): each backward pass is a span on the rank's
// "ddp backward" track, each bucket a span on a track of its own that lies inside the pass
// and ends when its allreduce (on the collectives track) ended.

#include "core/trace.hpp"

#include "ddp_util.hpp"
#include "support/temp_dir.hpp"

#include <tandem/ddp.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>

namespace tandem::ddptest {
namespace {

using nlohmann::json;

double end_of(const json& e) {
  return e.at("ts").get<double>() + e.at("dur").get<double>();
}

TEST(ReducerTrace, BucketsOnTheirOwnTracksInsideTheBackwardSpan) {
  testing::TempDir dir;
  const auto file = dir / "ddp.json";
  constexpr int kPasses = 3;
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        FakeModel m(cnn_model());
        ddp::ReducerOptions o;
        o.first_bucket_bytes = 16 * 1024;
        o.bucket_cap_bytes = 64 * 1024;
        ddp::Reducer r(comm, m.views(), o);
        for (int t = 0; t < kPasses; ++t) {
          backward_pass(r, m, ctx.rank, t);
          EXPECT_EQ(wrong_averages(m.view(0), 0, ctx.size, t, t), 0u);
        }
        EXPECT_GE(r.stats().buckets.size(), 2u);
      },
      run_options({"TANDEM_TRACE=" + file.string()})));

  ASSERT_EQ(core::trace::merge_parts(file, true), 2u);
  std::ifstream in(file);
  const json trace = json::parse(in);

  struct Rank {
    std::map<int, std::string> threads;  // tid -> name
    std::vector<json> passes, finalizes, buckets;
    std::map<std::string, json> collectives;  // by name
  };
  std::map<int, Rank> ranks;
  for (const auto& e : trace.at("traceEvents")) {
    Rank& r = ranks[e.at("pid").get<int>()];
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      r.threads[e.at("tid").get<int>()] = e.at("args").at("name");
    if (e.at("ph") != "X") continue;
    const std::string name = e.at("name");
    if (e.at("cat") == "collective") r.collectives[name] = e;
    if (name.starts_with("backward #")) r.passes.push_back(e);
    if (name == "finalize_backward") r.finalizes.push_back(e);
    if (name.starts_with("bucket #")) r.buckets.push_back(e);
  }
  ASSERT_EQ(ranks.size(), 2u);
  for (auto& [pid, r] : ranks) {
    SCOPED_TRACE(fmt::format("rank {}", pid));
    ASSERT_EQ(r.passes.size(), static_cast<std::size_t>(kPasses));
    ASSERT_EQ(r.finalizes.size(), static_cast<std::size_t>(kPasses));
    const int backward_tid = r.passes[0].at("tid");
    EXPECT_EQ(r.threads[backward_tid], "ddp backward");
    ASSERT_FALSE(r.buckets.empty());
    int overlapping = 0;
    for (const auto& b : r.buckets) {
      const int tid = b.at("tid");
      const std::string bucket = b.at("name").get<std::string>().substr(8);
      EXPECT_NE(tid, backward_tid);
      EXPECT_EQ(r.threads[tid], "ddp bucket " + bucket) << b.dump();
      EXPECT_GE(b.at("dur").get<double>(), 0.0);
      EXPECT_GE(b.at("args").at("queued_us").get<double>(), 0.0);
      // Inside exactly one backward span (1 ns of rounding either way).
      std::size_t inside = 0;
      for (std::size_t k = 0; k < r.passes.size(); ++k) {
        const auto& p = r.passes[k];
        if (b.at("ts").get<double>() - b.at("args").at("queued_us").get<double>() >=
                p.at("ts").get<double>() - 1e-3 &&
            end_of(b) <= end_of(p) + 1e-3) {
          ++inside;
          if (b.at("ts").get<double>() < r.finalizes[k].at("ts").get<double>()) ++overlapping;
        }
      }
      EXPECT_EQ(inside, 1u) << b.dump();
      // Its allreduce is on the collectives track, on another thread track, and ended
      // before the bucket was seen done.
      const auto c = r.collectives.find(
          fmt::format("allreduce #{}", b.at("args").at("collective").get<int>()));
      ASSERT_NE(c, r.collectives.end()) << b.dump();
      EXPECT_NE(c->second.at("tid").get<int>(), tid);
      EXPECT_EQ(c->second.at("args").at("count"), b.at("args").at("count"));
      EXPECT_LE(end_of(c->second), end_of(b) + 1e-3);
      EXPECT_GE(c->second.at("ts").get<double>(), b.at("ts").get<double>() - 1e-3);
    }
    // Buckets started while gradients were still coming in: overlap with backward shows.
    EXPECT_GE(overlapping, kPasses);
    for (std::size_t k = 0; k < r.passes.size(); ++k) {
      EXPECT_GE(r.finalizes[k].at("ts").get<double>(), r.passes[k].at("ts").get<double>());
      EXPECT_LE(end_of(r.finalizes[k]), end_of(r.passes[k]) + 1e-3);
      EXPECT_EQ(r.passes[k].at("args").at("sync"), true);
    }
  }
}

}  // namespace
}  // namespace tandem::ddptest
