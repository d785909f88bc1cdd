// tandem-perf --tune under tandemrun: a quick run writes a tuning file that the runtime's own
// parser accepts, that a second context is added to, and that tandem-perf then runs with.
#include "comm/choice/tuning.hpp"
#include "subprocess.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace tandem::testing {
namespace {

using namespace std::chrono_literals;

ProcessResult run_perf(const std::vector<std::string>& args,
                       const std::vector<std::string>& env = {}) {
  std::vector<std::string> argv{tandemrun_path(), "--nproc-per-node", "2", tandem_perf_path()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, env, 240s);
}

comm::TuningFile read_tuning(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return comm::parse_tuning(text.str(), path, algorithms::Registry::builtin());
}

TEST(TandemPerfTune, WritesAFileTheRuntimeAccepts) {
  const TempDir dir;
  const std::string path = dir.file("tuning.json");
  const auto shm =
      run_perf({"--tune", "-b", "8", "-e", "64", "-n", "2", "-w", "1", "--tune-out", path});
  ASSERT_FALSE(shm.timed_out);
  ASSERT_EQ(shm.exit_code, 0) << shm.out << shm.err;
  EXPECT_NE(shm.out.find("written to " + path), std::string::npos) << shm.out;
  EXPECT_NE(shm.out.find("more than 3 % faster"), std::string::npos) << shm.out;
  // Broadcast is timed in place, as programs call it; the others out of place.
  EXPECT_NE(shm.out.find("# broadcast on 2 ranks"), std::string::npos) << shm.out;
  for (const auto& line : split_lines(shm.out)) {
    if (line.find(" on 2 ranks") == std::string::npos) continue;
    const bool broadcast = line.find("# broadcast on") != std::string::npos;
    EXPECT_NE(line.find(broadcast ? ", in place, " : ", out-of-place, "), std::string::npos)
        << line;
  }

  const comm::TuningFile one = read_tuning(path);
  ASSERT_EQ(one.entries.size(), 1u);
  const comm::TuningEntry& e = one.entries[0];
  EXPECT_EQ(e.context, (comm::TuningContext{2, 1, "shm"}));
  for (CollectiveKind k :
       {CollectiveKind::allreduce, CollectiveKind::broadcast, CollectiveKind::reduce,
        CollectiveKind::allgather, CollectiveKind::reduce_scatter}) {
    // Every size is covered: the first range from 0, the last one without bound.
    EXPECT_NE(e.lookup(k, 0), nullptr) << to_string(k);
    EXPECT_NE(e.lookup(k, std::size_t{1} << 40), nullptr) << to_string(k);
  }

  // The runtime applies it: tandem-perf's algorithm column shows the file's choice.
  const auto run = run_perf({"-c", "allreduce", "-b", "32", "-e", "32", "-n", "2", "-w", "1"},
                            {"TANDEM_TUNING_FILE=" + path});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const std::string chosen(e.lookup(CollectiveKind::allreduce, 32)->name());
  bool found = false;
  for (const auto& line : split_lines(run.out))
    if (!line.starts_with("[rank 0]: #") && line.ends_with(" " + chosen)) found = true;
  EXPECT_TRUE(found) << "expected " << chosen << " in\n" << run.out;

  // Another context (TCP) is added beside the first, which stays.
  const auto tcp =
      run_perf({"--tune", "-c", "broadcast", "-b", "8", "-e", "16", "-n", "2", "--tune-out", path},
               {"TANDEM_SHM_DISABLE=1"});
  ASSERT_EQ(tcp.exit_code, 0) << tcp.out << tcp.err;
  const comm::TuningFile two = read_tuning(path);
  ASSERT_EQ(two.entries.size(), 2u);
  EXPECT_NE(two.match({2, 1, "shm"}), nullptr);
  const comm::TuningEntry* t = two.match({2, 1, "tcp"});
  ASSERT_NE(t, nullptr);
  EXPECT_NE(t->lookup(CollectiveKind::broadcast, 8), nullptr);
  EXPECT_EQ(t->lookup(CollectiveKind::allreduce, 8), nullptr);  // only -c was tuned
}

TEST(TandemPerfTune, RefusesAForcedAlgorithm) {
  const auto r = run_process({tandem_perf_path(), "--tune", "-a", "ring"}, {}, 60s);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("leave out -a"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tandem::testing
