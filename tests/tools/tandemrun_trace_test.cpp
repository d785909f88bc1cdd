// tandemrun and the timeline: with TANDEM_TRACE set, the workers' parts become one file when
// the job ends; `tandemrun --merge-trace FILE` joins parts left by a run without it.
#include "core/trace.hpp"
#include "subprocess.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <set>

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
