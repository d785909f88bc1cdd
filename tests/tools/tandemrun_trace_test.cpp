// tandemrun and the timeline: with TANDEM_TRACE set, the workers' parts become one file when
// the job ends; `tandemrun --merge-trace FILE` joins parts left by a run without it.
#include "core/trace.hpp"
#include "subprocess.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <vector>

namespace tandem::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
namespace fs = std::filesystem;

json read_json(const fs::path& p) {
  std::ifstream in(p);
  EXPECT_TRUE(in.good()) << p;
  return json::parse(in);
}

TEST(TandemrunTrace, MergesTheRanksPartsIntoTheFileWhenTheJobEnds) {
  TempDir dir;
  const auto file = dir / "perf.json";
  const auto r = run_process({tandemrun_path(), "--nproc-per-node", "2", tandem_perf_path(), "-b",
                              "8", "-e", "64", "-n", "2", "-w", "1"},
                             {"TANDEM_TRACE=" + file.string()}, 120s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("timeline of 2 ranks written to " + file.string()), std::string::npos)
      << r.err;
  ASSERT_TRUE(fs::exists(file));
  EXPECT_TRUE(core::trace::find_parts(file).empty()) << "parts left behind";
  const json trace = read_json(file);
  std::set<int> named, with_allreduce;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "process_name") named.insert(e.at("pid").get<int>());
    if (e.at("ph") == "X" && e.at("name").get<std::string>().starts_with("allreduce #"))
      with_allreduce.insert(e.at("pid").get<int>());
  }
  EXPECT_EQ(named, (std::set<int>{0, 1}));
  EXPECT_EQ(with_allreduce, (std::set<int>{0, 1}));
}

// A job stopped while ranks hang in a collective: each rank writes its part on SIGTERM, and
// the collective the others wait in shows where they were. The workers are stopped one after
// another, so a rank may see its peer's link close before its own signal arrives: its
// allreduce #5 then ends with that error instead of being cut off unfinished (the unit tests of
// the trace check the unfinished flag itself). Either way it is the last span of ranks 0 and 2,
// and it did not succeed.
TEST(TandemrunTrace, StoppedJobShowsTheCollectiveRanksHangIn) {
  TempDir dir;
  const auto file = dir / "hang.json";
  Subprocess p(
      {tandemrun_path(), "--nproc-per-node", "3",
       (fs::path(TANDEM_BINARY_DIR) / "bin" / "fault_worker").string(), "hang", "1", "5", "10"},
      {"TANDEM_TRACE=" + file.string(), "TANDEM_TIMEOUT=120", "TANDEM_STALL_WARN=1"});
  // The stall warning: ranks 0 and 2 are inside allreduce #5.
  ASSERT_TRUE(p.wait_for(
      [](const std::string& out, const std::string& err) {
        return (out + err).find("ranks 0,2 waiting in it since") != std::string::npos;
      },
      90s))
      << p.out() << p.err();
  ASSERT_EQ(::kill(p.pid(), SIGTERM), 0);
  const auto r = p.wait(60s);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 143) << r.err;
  EXPECT_NE(r.err.find("timeline of 3 ranks written"), std::string::npos) << r.err;
  const json trace = read_json(file);
  std::map<int, std::vector<json>> spans;  // each rank's spans, in the order written
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == "X") spans[e.at("pid").get<int>()].push_back(e);
  for (const int rank : {0, 2}) {
    SCOPED_TRACE(::testing::Message() << "rank " << rank);
    ASSERT_EQ(spans[rank].size(), 6u);
    EXPECT_EQ(spans[rank].back().at("name"), "allreduce #5");
    const json& args = spans[rank].back().at("args");
    EXPECT_TRUE(args.value("unfinished", false) || args.contains("error")) << args.dump();
  }
  // Rank 1 waits in pause(): only the stop signal's writer can have written its part.
  EXPECT_EQ(spans[1].size(), 5u) << "rank 1 completed allreduce #0-#4 and never entered #5";
}

TEST(TandemrunTrace, MergeTraceJoinsLeftoverParts) {
  TempDir dir;
  const auto file = dir / "left.json";
  for (int rank = 0; rank < 2; ++rank) {
    core::trace::Sink sink(file, 100);
    sink.set_rank(rank);
    auto ring = sink.open(rank, "collectives");
    auto& e = ring->next();
    e.label = "barrier";
    e.number = 0;
    e.category = "collective";
    e.start = Clock::now();
    e.end = e.start;
    ring->commit();
  }
  ASSERT_EQ(core::trace::find_parts(file).size(), 2u);
  const auto r = run_process({tandemrun_path(), "--merge-trace", file.string()}, {}, 60s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("merged 2 parts"), std::string::npos) << r.err;
  EXPECT_TRUE(core::trace::find_parts(file).empty());
  int barriers = 0;
  const json merged = read_json(file);
  for (const auto& e : merged.at("traceEvents"))
    barriers += e.at("name").get<std::string>() == "barrier #0" ? 1 : 0;
  EXPECT_EQ(barriers, 2);

  const auto none =
      run_process({tandemrun_path(), "--merge-trace", (dir / "none.json").string()}, {}, 60s);
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("no trace parts"), std::string::npos) << none.err;
}

}  // namespace
}  // namespace tandem::testing
