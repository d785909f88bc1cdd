// tandem-perf under tandemrun: every collective runs, every row is checked and correct.
#include "subprocess.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <regex>
#include <sstream>
#include <unistd.h>

namespace tandem::testing {
namespace {

using namespace std::chrono_literals;

struct PerfRow {
  std::size_t bytes = 0, count = 0;
  std::string type, redop, algorithm;
  std::string wrong_out, wrong_in;
};

struct PerfRun {
  ProcessResult result;
  std::vector<PerfRow> rows;
  std::vector<std::string> comments;  ///< "#" lines, prefix removed
};

PerfRun run_perf(int ranks, const std::vector<std::string>& perf_args,
                 const std::vector<std::string>& env = {}) {
  std::vector<std::string> argv{tandemrun_path(), "--nproc-per-node", std::to_string(ranks),
                                tandem_perf_path()};
  argv.insert(argv.end(), perf_args.begin(), perf_args.end());
  PerfRun run;
  run.result = run_process(argv, env, 240s);
  for (const auto& line : split_lines(run.result.out)) {
    EXPECT_TRUE(line.starts_with("[rank 0]: ")) << "only rank 0 prints: " << line;
    const std::string body = line.substr(std::min<std::size_t>(line.size(), 10));
    if (body.starts_with("#")) {
      run.comments.push_back(body);
      continue;
    }
    std::istringstream in(body);
    PerfRow r;
    std::string root, t1, p1, a1, b1, t2, p2, a2, b2;
    in >> r.bytes >> r.count >> r.type >> r.redop >> root >> t1 >> p1 >> a1 >> b1 >> r.wrong_out >>
        t2 >> p2 >> a2 >> b2 >> r.wrong_in >> r.algorithm;
    EXPECT_FALSE(in.fail()) << "malformed row: " << body;
    run.rows.push_back(r);
  }
  return run;
}

bool has_comment(const PerfRun& run, const std::string& text) {
  for (const auto& c : run.comments)
    if (c == text) return true;
  return false;
}

void expect_all_correct(const PerfRun& run, std::size_t rows, bool in_place) {
  ASSERT_FALSE(run.result.timed_out);
  EXPECT_EQ(run.result.exit_code, 0) << run.result.out << run.result.err;
  EXPECT_EQ(run.rows.size(), rows) << run.result.out;
  for (const auto& r : run.rows) {
    EXPECT_EQ(r.wrong_out, "0") << r.bytes << " bytes, out-of-place";
    EXPECT_EQ(r.wrong_in, in_place ? "0" : "N/A") << r.bytes << " bytes, in-place";
    EXPECT_FALSE(r.algorithm.empty());
  }
  EXPECT_TRUE(has_comment(run, "# Out of bounds values : 0 OK")) << run.result.out;
  bool avg = false;
  for (const auto& c : run.comments) avg = avg || c.starts_with("# Avg bus bandwidth : ");
  EXPECT_TRUE(avg) << run.result.out;
}

TEST(TandemPerf, AllreduceTwoRanks) {
  const auto run =
      run_perf(2, {"-c", "allreduce", "-b", "8", "-e", "1M", "-f", "8", "-n", "3", "-w", "1"});
  expect_all_correct(run, 6, true);  // 8 B .. 256 KiB
  ASSERT_FALSE(run.rows.empty());
  EXPECT_EQ(run.rows.front().bytes, 8u);
  EXPECT_EQ(run.rows.front().count, 2u);
  EXPECT_EQ(run.rows.front().type, "f32");
  EXPECT_EQ(run.rows.front().redop, "sum");
  EXPECT_TRUE(has_comment(run, "#  Transports from rank 0: shm to 1 peer(s) (1)"))
      << run.result.out;
}

TEST(TandemPerf, EveryCollectiveTwoRanks) {
  for (const char* c :
       {"broadcast", "reduce", "allgather", "reduce_scatter", "alltoall", "sendrecv"}) {
    SCOPED_TRACE(c);
    const auto run = run_perf(2, {"-c", c, "-b", "8", "-e", "1M", "-f", "8", "-n", "3", "-w", "1"});
    const bool in_place = std::string_view(c) != "alltoall" && std::string_view(c) != "sendrecv";
    expect_all_correct(run, 6, in_place);
  }
  const auto barrier = run_perf(2, {"-c", "barrier", "-n", "3", "-w", "1"});
  expect_all_correct(barrier, 1, false);
}

TEST(TandemPerf, ThreeRanksUnevenSizesAndRoot) {
  // 3 ranks: sizes are rounded down to whole elements per rank.
  for (const char* c : {"allreduce", "allgather", "reduce_scatter", "alltoall", "sendrecv"}) {
    SCOPED_TRACE(c);
    const auto run =
        run_perf(3, {"-c", c, "-b", "16", "-e", "1M", "-f", "8", "-n", "3", "-w", "1"});
    const bool in_place = std::string_view(c) != "alltoall" && std::string_view(c) != "sendrecv";
    expect_all_correct(run, 6, in_place);
    for (const auto& r : run.rows) {
      if (std::string_view(c) == "allreduce" || std::string_view(c) == "sendrecv") continue;
      EXPECT_EQ(r.bytes, r.count * 3 * 4) << "whole buffer = count per rank x ranks x 4 B";
    }
  }
  for (const char* c : {"broadcast", "reduce"}) {
    SCOPED_TRACE(c);
    const auto run =
        run_perf(3, {"-c", c, "-r", "2", "-b", "1K", "-e", "1M", "-f", "32", "-n", "3", "-w", "1"});
    expect_all_correct(run, 3, true);  // 1K, 32K, 1M
  }
}

TEST(TandemPerf, EveryDtypeAndOp) {
  const auto run = run_perf(3, {"-c", "allreduce", "-d", "all", "-o", "all", "-b", "64", "-e",
                                "64K", "-f", "1024", "-n", "2", "-w", "0"});
  expect_all_correct(run, 8 * 5 * 2, true);
}

TEST(TandemPerf, BitwiseOpsOnEveryIntegerDtype) {
  for (const char* op : {"band", "bor", "bxor"})
    for (const char* dtype : {"i8", "u8", "i32", "i64"}) {
      const auto run = run_perf(3, {"-c", "allreduce", "-d", dtype, "-o", op, "-b", "64", "-e",
                                    "64K", "-f", "1024", "-n", "2", "-w", "0"});
      expect_all_correct(run, 2, true);
    }
}

TEST(TandemPerf, TcpTransportAndJson) {
  TempDir dir;
  const std::string json = dir.file("rows.json");
  const auto run = run_perf(
      2,
      {"-c", "allreduce", "-b", "1K", "-e", "4M", "-f", "16", "-n", "3", "-w", "1", "--json", json},
      {"TANDEM_SHM_DISABLE=1"});
  expect_all_correct(run, 4, true);  // 1K, 16K, 256K, 4M
  EXPECT_TRUE(has_comment(run, "#  Transports from rank 0: tcp to 1 peer(s) (1)"))
      << run.result.out;
  std::ifstream f(json);
  ASSERT_TRUE(f.good()) << "no JSON written";
  const auto doc = nlohmann::json::parse(f);
  EXPECT_EQ(doc["collective"], "allreduce");
  EXPECT_EQ(doc["world_size"], 2);
  ASSERT_EQ(doc["rows"].size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    const auto& row = doc["rows"][i];
    EXPECT_EQ(row["size_bytes"].get<std::size_t>(), run.rows[i].bytes);
    EXPECT_EQ(row["out_of_place"]["wrong"], 0);
    EXPECT_EQ(row["in_place"]["wrong"], 0);
    EXPECT_GT(row["out_of_place"]["time_us_mean"].get<double>(), 0.0);
    for (const char* where : {"out_of_place", "in_place"}) {
      const auto& m = row[where];
      EXPECT_LE(m["time_us_p50"].get<double>(), m["time_us_p99"].get<double>()) << m.dump();
      EXPECT_LE(m["time_us_p99"].get<double>(), m["time_us_max"].get<double>()) << m.dump();
      EXPECT_GT(m["time_us_max"].get<double>(), 0.0) << m.dump();
      // Each rank's loop time is the mean of its iterations, so the slowest loop is at most
      // the mean of the slowest iterations.
      EXPECT_GT(m["time_us_loop"].get<double>(), 0.0) << m.dump();
      EXPECT_LE(m["time_us_loop"].get<double>(), m["time_us_mean"].get<double>() * (1 + 1e-9))
          << m.dump();
      // Every timed call, in order: their mean is the mean, their largest the max.
      const auto calls = m["time_us_calls"].get<std::vector<double>>();
      ASSERT_EQ(calls.size(), 3u) << m.dump();
      double sum = 0;
      for (double t : calls) sum += t;
      EXPECT_NEAR(sum / 3, m["time_us_mean"].get<double>(), 1e-9) << m.dump();
      EXPECT_EQ(*std::max_element(calls.begin(), calls.end()), m["time_us_max"].get<double>())
          << m.dump();
    }
    EXPECT_GT(row["in_place"]["busbw_gbps"].get<double>(), 0.0);
  }
}

TEST(TandemPerf, ForcedAlgorithmShowsInEveryRow) {
  const auto run = run_perf(2, {"-c", "allreduce", "-a", "ring", "-b", "8", "-e", "64K", "-f", "64",
                                "-n", "2", "-w", "0"});
  expect_all_correct(run, 3, true);
  for (const auto& r : run.rows) EXPECT_EQ(r.algorithm, "ring");
  const auto bad = run_perf(2, {"-c", "allreduce", "-a", "no-such-algorithm", "-b", "8", "-e", "8",
                                "-n", "1", "-w", "0"});
  EXPECT_EQ(bad.result.exit_code, 2) << bad.result.err;
  EXPECT_NE(bad.result.err.find("no-such-algorithm"), std::string::npos) << bad.result.err;
}

// The column names what ran: the direct algorithm over buffers that are not registered
// hands the call to the ring.
TEST(TandemPerf, ForcedDirectOverPrivateBuffersShowsTheRingThatRan) {
  const auto run = run_perf(
      2, {"-c", "allreduce", "-a", "direct", "-b", "4M", "-e", "4M", "-n", "2", "-w", "0"});
  expect_all_correct(run, 1, true);
  for (const auto& r : run.rows) EXPECT_EQ(r.algorithm, "ring") << run.result.out;
}

TEST(TandemPerf, NoCheckLeavesWrongColumnsOpen) {
  const auto run = run_perf(
      2, {"-c", "reduce_scatter", "--no-check", "-b", "1K", "-e", "1K", "-n", "2", "-w", "0"});
  EXPECT_EQ(run.result.exit_code, 0) << run.result.err;
  ASSERT_EQ(run.rows.size(), 1u) << run.result.out;
  EXPECT_EQ(run.rows[0].wrong_out, "N/A");
  EXPECT_EQ(run.rows[0].wrong_in, "N/A");
  EXPECT_TRUE(has_comment(run, "#  sizes: 1 KiB .. 1 KiB x2  iters: 2  warmup: 0  check: off"))
      << run.result.out;
}

TEST(TandemPerf, RegisteredBuffersCheckCorrectAndRunDirect) {
  for (const char* coll : {"allreduce", "broadcast"}) {
    const auto run = run_perf(
        3, {"-c", coll, "--registered", "-b", "4K", "-e", "4M", "-f", "32", "-n", "2", "-w", "1"});
    EXPECT_EQ(run.result.exit_code, 0) << run.result.out << run.result.err;
    EXPECT_TRUE(has_comment(run, "#  Buffers: registered (Communicator::allocate)"))
        << run.result.out;
    ASSERT_EQ(run.rows.size(), 3u) << run.result.out;  // 4K, 128K, 4M
    for (const PerfRow& r : run.rows) {
      EXPECT_EQ(r.wrong_out, "0") << coll << " " << r.bytes;
      EXPECT_EQ(r.wrong_in, "0") << coll << " " << r.bytes;
      if (r.bytes >= (1u << 20)) {
        EXPECT_EQ(r.algorithm, "direct") << coll << " " << r.bytes;
      }
    }
  }
}

TEST(TandemrunExamples, MinimalAllreduceOnThreeRanks) {
  const std::string example = TANDEM_BINARY_DIR "/bin/minimal_allreduce";
  if (::access(example.c_str(), X_OK) != 0) GTEST_SKIP() << example << " is not built";
  const auto r = run_process({tandemrun_path(), "--nproc-per-node", "3", example}, {}, 120s);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  auto lines = split_lines(r.out);
  std::sort(lines.begin(), lines.end());
  std::vector<std::string> want;
  for (int rank = 0; rank < 3; ++rank)
    want.push_back(fmt::format("[rank {0}]: rank {0} of 3: allreduce ok (sum of ranks = 3)", rank));
  EXPECT_EQ(lines, want);
}

TEST(TandemPerf, BadFlagsExit2) {
  for (const std::vector<std::string>& args : {std::vector<std::string>{"-c", "allsum"},
                                               {"-b", "8X"},
                                               {"-b", "1M", "-e", "1K"},
                                               {"-d", "f8"},
                                               {"-o", "xor"},
                                               {"-o", "band", "-d", "f32"},
                                               {"-n", "0"},
                                               {"-f", "1"},
                                               {"--bogus"}}) {
    std::vector<std::string> argv{tandem_perf_path()};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto r = run_process(argv);
    EXPECT_EQ(r.exit_code, 2) << args.front() << ": " << r.err;
    EXPECT_TRUE(r.err.starts_with("tandem-perf: ")) << r.err;
  }
}

// --device cuda loads the CUDA plugin beside libtandem_cuda.so at that moment (tandem-perf links
// no CUDA library): where the plugin is not, the error names the path it looked at.
TEST(TandemPerf, DeviceCudaNamesAMissingPlugin) {
  const auto r = run_process({tandem_perf_path(), "--device", "cuda:0", "-b", "8", "-e", "8"},
                             {"TANDEM_CUDA_LIBRARY=/nonexistent/libtandem_cuda.so"});
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.find("/nonexistent/libtandem_tools_cuda.so does not exist") !=
              std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace tandem::testing
