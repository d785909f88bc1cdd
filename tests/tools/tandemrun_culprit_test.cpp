// tandemrun's failure summary names the culprit from the workers' progress reports: the rank
// that never entered the collective everyone waits in, or the ranks whose calls disagree;
// the workers' own stall warnings say the same while the job still runs.

#include "subprocess.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tandem::testing {
namespace {

using namespace std::chrono_literals;

std::string fault_worker_path() {
  return TANDEM_BINARY_DIR "/bin/fault_worker";
}

bool contains(const std::string& s, std::string_view what) {
  return s.find(what) != std::string::npos;
}

// Text after the summary's "Collectives" heading.
std::string collectives_section(const std::string& err) {
  const auto at = err.find("Collectives (the workers' last reports):");
  return at == std::string::npos ? std::string() : err.substr(at);
}

TEST(TandemrunCulprit, AHangingRankIsNamedByTheStallWarningAndTheSummary) {
  const auto r = run_process(
      {tandemrun_path(), "--nproc-per-node", "3", fault_worker_path(), "hang", "2", "5"},
      {"TANDEM_TIMEOUT=4", "TANDEM_STALL_WARN=1"}, 120s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_NE(r.exit_code, 0) << r.err;
  const std::string all = r.out + r.err;
  // While it hangs: every waiting rank's warning names rank 2.
  EXPECT_TRUE(contains(all,
                       "allreduce #5 (f32 x 1024) has not completed after 1 s "
                       "(TANDEM_STALL_WARN): ranks 0,1 waiting in it since"))
      << all;
  EXPECT_TRUE(contains(all, "rank 2 never entered it (last completed #4)")) << all;
  // After it: the summary.
  const std::string section = collectives_section(r.err);
  ASSERT_FALSE(section.empty()) << r.err;
  EXPECT_TRUE(contains(section, "allreduce #5 (f32 x 1024): ranks 0,1 waiting in it since"))
      << section;
  EXPECT_TRUE(contains(section, "rank 2 never entered it (last completed #4)")) << section;
  // Whichever rank timed out first reported it; tandemrun may stop the other before it does.
  EXPECT_TRUE(contains(section, " reported: allreduce #5")) << section;
  EXPECT_TRUE(contains(section, "timed out")) << section;
}

TEST(TandemrunCulprit, MismatchedCallsAreShownInTheSummary) {
  const auto r = run_process(
      {tandemrun_path(), "--nproc-per-node", "3", fault_worker_path(), "mismatch", "2", "3"}, {},
      120s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_NE(r.exit_code, 0) << r.err;
  const std::string section = collectives_section(r.err);
  ASSERT_FALSE(section.empty()) << r.err;
  EXPECT_TRUE(contains(section, "called allreduce (f32 x 1024)")) << section;
  EXPECT_TRUE(contains(section, "rank 2 called broadcast (f32 x 1024, root 0)")) << section;
}

TEST(TandemrunCulprit, AKilledRankIsTheRootCauseAndItsLastReportIsMarked) {
  const auto r = run_process(
      {tandemrun_path(), "--nproc-per-node", "3", fault_worker_path(), "kill", "1", "4"}, {}, 120s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 137) << r.err;
  EXPECT_TRUE(contains(r.err, "rank      : 1")) << r.err;
  const std::string section = collectives_section(r.err);
  // Whether the survivors noticed before tandemrun stopped them varies; every rank published
  // progress or at least its address record (which stands for it), so the section is there.
  ASSERT_FALSE(section.empty()) << r.err;
}

TEST(TandemrunCulprit, ProgramsWithoutACommunicatorGetNoSection) {
  const auto r =
      run_process({tandemrun_path(), "--nproc-per-node", "2", "/bin/sh", "-c", "exit 3"}, {}, 60s);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_TRUE(collectives_section(r.err).empty()) << r.err;
}

}  // namespace
}  // namespace tandem::testing
