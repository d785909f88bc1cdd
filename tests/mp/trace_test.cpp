// The timeline (TANDEM_TRACE) across ranks: every rank writes its part, the merged file is
// valid JSON with one process track per rank, collectives carry their arguments, spans on a
// track never overlap, and a failed collective is marked even when the rank dies after it.

#include "core/trace.hpp"

#include "mp_util.hpp"
#include "support/temp_dir.hpp"

#include <tandem/error.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <span>

namespace tandem::mptest {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

json merged_trace(const std::filesystem::path& file, std::size_t ranks) {
  EXPECT_EQ(core::trace::merge_parts(file, true), ranks);
  EXPECT_TRUE(core::trace::find_parts(file).empty());
  std::ifstream in(file);
  EXPECT_TRUE(in.good()) << file;
  return json::parse(in);  // throws (failing the test) when the file is not JSON
}

double end_of(const json& e) {
  return e.at("ts").get<double>() + e.at("dur").get<double>();
}

// The complete ("X") events of each (pid, tid), by start time.
std::map<std::pair<int, int>, std::vector<json>> spans_by_track(const json& trace) {
  std::map<std::pair<int, int>, std::vector<json>> tracks;
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == "X") tracks[{e.at("pid").get<int>(), e.at("tid").get<int>()}].push_back(e);
  for (auto& [key, v] : tracks)
    std::stable_sort(v.begin(), v.end(), [](const json& a, const json& b) {
      return a.at("ts").get<double>() < b.at("ts").get<double>();
    });
  return tracks;
}

// Spans on one track follow each other or nest; none is negative.
void expect_well_nested(const std::vector<json>& spans) {
  std::vector<double> open;  // ends of the enclosing spans
  for (const auto& e : spans) {
    EXPECT_GE(e.at("dur").get<double>(), 0.0) << e.dump();
    const double ts = e.at("ts").get<double>();
    while (!open.empty() && open.back() <= ts + 1e-3) open.pop_back();
    if (!open.empty()) {
      EXPECT_LE(end_of(e), open.back() + 1e-3) << "overlaps its enclosing span: " << e.dump();
    }
    open.push_back(end_of(e));
  }
}

TEST(Trace, MergedTimelineHasOneTrackPerRankWithEveryCall) {
  testing::TempDir dir;
  const auto file = dir / "timeline.json";
  constexpr int kRanks = 3;
  const auto exits = testing::run_ranks(
      kRanks,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        std::vector<float> grads(1024, 1.0f);
        comm->allreduce(BufferView::of(std::span<float>(grads)), ReduceOp::sum);  // #0
        std::vector<std::int32_t> ids(16, ctx.rank);
        // Over memory that is not registered, with cross-memory attach off (TANDEM_CMA=0
        // below): runs the ring.
        CallOptions direct;
        direct.algorithm = "direct";
        comm->broadcast(BufferView::of(std::span<std::int32_t>(ids)), 1, direct);  // #1
        std::vector<double> mine(4, ctx.rank), all(4 * kRanks);
        comm->allgather(BufferView::of(std::span<double>(mine)),
                        BufferView::of(std::span<double>(all)));  // #2
        std::vector<float> a(256, 1.0f), b(256, 2.0f);
        auto wa = comm->allreduce_async(BufferView::of(std::span<float>(a)),
                                        BufferView::of(std::span<float>(a)), ReduceOp::max);  // #3
        auto wb = comm->allreduce_async(BufferView::of(std::span<float>(b)),
                                        BufferView::of(std::span<float>(b)), ReduceOp::sum);  // #4
        wa->wait();
        wb->wait();
        comm->barrier();  // #5
        std::vector<std::uint8_t> out(32, 1), in(32, 0);
        const int next = (ctx.rank + 1) % ctx.size, prev = (ctx.rank + ctx.size - 1) % ctx.size;
        auto r = comm->recv_async(BufferView::of(std::span<std::uint8_t>(in)), prev, 9);
        auto s = comm->send_async(BufferView::of(std::span<std::uint8_t>(out)), next, 9);
        s->wait();
        r->wait();
        comm->barrier();  // #6
        // A split communicator (its setup is allgather #7 of the world) gets its own track.
        auto sub = comm->split(ctx.rank == 0 ? 0 : 1, ctx.rank);
        std::vector<float> one(2, 1.0f);
        sub->allreduce(BufferView::of(std::span<float>(one)), ReduceOp::sum);
        EXPECT_EQ(one[0], ctx.rank == 0 ? 1.0f : 2.0f);
        sub.reset();
        EXPECT_EQ(grads[0], static_cast<float>(kRanks));
        EXPECT_EQ(ids[0], 1);
        EXPECT_EQ(in[0], 1);
      },
      run_options("shm", {"TANDEM_TRACE=" + file.string(), "TANDEM_CMA=0"}));
  testing::expect_all_ok(exits);
  const json trace = merged_trace(file, kRanks);

  std::set<int> processes;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") != "M" || e.at("name") != "process_name") continue;
    const int pid = e.at("pid").get<int>();
    processes.insert(pid);
    EXPECT_TRUE(
        e.at("args").at("name").get<std::string>().starts_with(fmt::format("rank {} (", pid)))
        << e.dump();
  }
  EXPECT_EQ(processes, (std::set<int>{0, 1, 2}));

  std::map<std::pair<int, int>, std::string> thread_names;
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      thread_names[{e.at("pid").get<int>(), e.at("tid").get<int>()}] = e.at("args").at("name");
  const auto tracks = spans_by_track(trace);
  std::map<int, std::vector<json>> collectives;   // per rank, the world's track
  std::map<int, std::vector<std::string>> split;  // per rank, the split communicator's track
  for (const auto& [key, spans] : tracks) {
    expect_well_nested(spans);
    const std::string& track = thread_names[key];
    for (const auto& e : spans) {
      if (e.at("cat") != "collective") continue;
      if (track == "collectives") {
        collectives[key.first].push_back(e);
      } else {
        EXPECT_TRUE(track.starts_with("collectives of '")) << track;
        split[key.first].push_back(e.at("name"));
      }
    }
  }
  for (int r = 0; r < kRanks; ++r)
    EXPECT_EQ(split[r], (std::vector<std::string>{"allreduce #0"})) << "rank " << r;
  ASSERT_EQ(collectives.size(), 3u);
  for (const auto& [rank, spans] : collectives) {
    std::vector<std::string> names;
    for (const auto& e : spans) names.push_back(e.at("name"));
    EXPECT_EQ(names, (std::vector<std::string>{"allreduce #0", "broadcast #1", "allgather #2",
                                               "allreduce #3", "allreduce #4", "barrier #5",
                                               "barrier #6", "allgather #7"}))
        << "rank " << rank;
    if (names.size() != 8) continue;
    const auto& ar = spans[0].at("args");
    EXPECT_EQ(ar.at("dtype"), "f32");
    EXPECT_EQ(ar.at("count"), 1024);
    EXPECT_EQ(ar.at("bytes"), 4096);
    EXPECT_EQ(ar.at("op"), "sum");
    EXPECT_EQ(ar.at("in_place"), true);
    EXPECT_FALSE(ar.at("algorithm").get<std::string>().empty());
    EXPECT_FALSE(ar.contains("error"));
    EXPECT_FALSE(ar.contains("fallback")) << ar.dump();
    EXPECT_EQ(spans[1].at("args").at("root"), 1);
    EXPECT_EQ(spans[1].at("args").at("algorithm"), "direct");
    EXPECT_EQ(spans[1].at("args").value("fallback", ""), "ring") << spans[1].dump();
    EXPECT_EQ(spans[1].at("args").at("dtype"), "i32");
    EXPECT_EQ(spans[2].at("args").at("in_place"), false);
    EXPECT_EQ(spans[2].at("args").at("dtype"), "f64");
    EXPECT_EQ(spans[3].at("args").at("op"), "max");
    // Asynchronous calls waited in the queue before they ran: both parts are drawn.
    EXPECT_TRUE(spans[3].at("args").contains("queued_us")) << spans[3].dump();
    EXPECT_GE(spans[4].at("args").at("queued_us").get<double>(), 0.0);
  }
  // The clocks are comparable across ranks: no rank leaves a barrier before every rank
  // entered it.
  for (int r = 0; r < kRanks; ++r)
    for (int q = 0; q < kRanks; ++q)
      if (collectives[r].size() == 8 && collectives[q].size() == 8) {
        EXPECT_GE(end_of(collectives[r][5]), collectives[q][5].at("ts").get<double>() - 100.0)
            << "rank " << r << " left barrier #5 before rank " << q << " entered it";
      }

  // Point to point and the queue: begin/end pairs on each rank's track.
  std::map<int, std::multiset<std::string>> p2p;
  int queue_begins = 0, queue_ends = 0;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "b" && e.value("cat", "") == "p2p") {
      const int pid = e.at("pid").get<int>();
      const int peer = e.at("args").at("peer").get<int>();
      p2p[pid].insert(fmt::format("{} {}", e.at("name").get<std::string>(), peer));
    }
    if (e.value("cat", "") == "queue") (e.at("ph") == "b" ? queue_begins : queue_ends)++;
  }
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(p2p[r], (std::multiset<std::string>{fmt::format("send {}", (r + 1) % kRanks),
                                                  fmt::format("recv {}", (r + 2) % kRanks)}))
        << "rank " << r;
  }
  EXPECT_GE(queue_begins, 2 * kRanks);
  EXPECT_EQ(queue_begins, queue_ends);
}

// The first failure writes the part at once: a rank that then dies without destroying its
// communicator still leaves its timeline, with the failed collective marked.
TEST(Trace, FailedCollectiveIsMarkedAndWrittenBeforeTheRankDies) {
  testing::TempDir dir;
  const auto file = dir / "failed.json";
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        std::vector<float> ok(8, 1.0f);
        comm->allreduce(BufferView::of(std::span<float>(ok)), ReduceOp::sum);
        std::vector<float> v(ctx.rank == 0 ? 100 : 200, 1.0f);
        EXPECT_THROW(comm->allreduce(BufferView::of(std::span<float>(v)), ReduceOp::sum,
                                     CallOptions{deadline_in(5s), {}}),
                     Error);
        // No destructor, no exit handlers: only what the failure path wrote survives.
        std::_Exit(::testing::Test::HasFailure() ? 1 : 0);
      },
      run_options("shm", {"TANDEM_TRACE=" + file.string()}));
  testing::expect_all_ok(exits);
  const json trace = merged_trace(file, 2);
  std::map<int, std::vector<json>> by_rank;
  for (const auto& [key, spans] : spans_by_track(trace))
    for (const auto& e : spans) by_rank[key.first].push_back(e);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(by_rank[r].size(), 2u) << "rank " << r;
    EXPECT_FALSE(by_rank[r][0].at("args").contains("error"));
    EXPECT_EQ(by_rank[r][1].at("name"), "allreduce #1");
    EXPECT_EQ(by_rank[r][1].at("args").at("count"), r == 0 ? 100 : 200);
    EXPECT_FALSE(by_rank[r][1].at("args").value("error", std::string()).empty())
        << by_rank[r][1].dump();
  }
}

}  // namespace
}  // namespace tandem::mptest
