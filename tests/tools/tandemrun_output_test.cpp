// tandemrun: worker output reaches the console as whole, prefixed lines.
#include "subprocess.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>

namespace tandem::testing {
namespace {

// Each rank prints `lines` lines to stdout and as many to stderr, alternating, of lengths
// that vary from 60 to ~8000 bytes; awk's block buffering splits them across writes.
std::string chatty_script(int lines) {
  return fmt::format(
      R"(awk -v r="$RANK" 'BEGIN {{
  for (i = 0; i < {0}; i++) {{
    n = 60 + (i * 997) % 8000
    pad = sprintf("%" n "s", ""); gsub(/ /, "x", pad)
    printf "r%d o l%d %s|\n", r, i, pad
    printf "r%d e l%d %s|\n", r, i, pad > "/dev/stderr"
  }}
}}')",
      lines);
}

void check_stream(const std::string& text, char stream, int ranks, int lines) {
  static const std::regex re(R"(^\[rank (\d+)\]: r(\d+) ([oe]) l(\d+) (x*)\|$)");
  std::map<int, int> next;  // rank -> next expected line index
  int count = 0;
  for (const auto& line : split_lines(text)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, re))
        << "torn or unprefixed line: " << line.substr(0, 200);
    const int rank = std::stoi(m[1]);
    ASSERT_EQ(std::stoi(m[2]), rank)
        << "a line of rank " << m[2] << " carries the prefix of " << rank;
    ASSERT_EQ(m[3].str()[0], stream);
    const int i = std::stoi(m[4]);
    ASSERT_EQ(i, next[rank]) << "rank " << rank << " lines out of order or missing";
    ASSERT_EQ(m[5].length(), static_cast<std::size_t>(60 + (i * 997) % 8000));
    ++next[rank];
    ++count;
  }
  EXPECT_EQ(count, ranks * lines);
  for (int r = 0; r < ranks; ++r) EXPECT_EQ(next[r], lines) << "rank " << r;
}

TEST(TandemrunOutput, ConcurrentLongLinesAreWholeAndPrefixed) {
  constexpr int kRanks = 3, kLines = 300;
  const auto r = run_process({tandemrun_path(), "--nproc-per-node", std::to_string(kRanks),
                              "/bin/sh", "-c", chatty_script(kLines)},
                             {}, std::chrono::seconds(120));
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code, 0) << r.err.substr(0, 2000);
  check_stream(r.out, 'o', kRanks, kLines);
  check_stream(r.err, 'e', kRanks, kLines);
}

TEST(TandemrunOutput, VeryLongLineIsWrittenInPrefixedPieces) {
  constexpr std::size_t kLen = 200000, kPiece = 64 * 1024;
  const auto r = run_process({tandemrun_path(), "--nproc-per-node", "1", "/bin/sh", "-c",
                              fmt::format("head -c {} /dev/zero | tr '\\0' y", kLen)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = split_lines(r.out);
  ASSERT_EQ(lines.size(), (kLen + kPiece - 1) / kPiece);
  std::size_t total = 0;
  for (const auto& line : lines) {
    ASSERT_TRUE(line.starts_with("[rank 0]: "));
    const std::string body = line.substr(10);
    EXPECT_LE(body.size(), kPiece);
    EXPECT_EQ(body.find_first_not_of('y'), std::string::npos);
    total += body.size();
  }
  EXPECT_EQ(total, kLen);
  EXPECT_EQ(r.out.back(), '\n') << "the partial last line is terminated";
}

// Output is read in batches while the workers run (not as each line is written, which put
// tandemrun on a CPU right when a rank started its next step), but it is still forwarded
// while they run: the worker below prints, then waits for the test to have seen the line.
TEST(TandemrunOutput, LinesOfARunningWorkerArriveWhileItRuns) {
  TempDir dir;
  const std::string seen = dir.file("seen");
  Subprocess p({tandemrun_path(), "--nproc-per-node", "1", "/bin/sh", "-c",
                fmt::format("echo ready; echo soon >&2; i=0; while [ ! -e {} ] && [ $i -lt 600 ]; "
                            "do i=$((i + 1)); sleep 0.1; done; [ -e {} ] && echo done",
                            seen, seen)});
  ASSERT_TRUE(p.wait_for(
      [](const std::string& out, const std::string& err) {
        return out.find("[rank 0]: ready\n") != std::string::npos &&
               err.find("[rank 0]: soon\n") != std::string::npos;
      },
      std::chrono::seconds(60)))
      << "out: " << p.out() << " err: " << p.err();
  { std::ofstream(seen) << "x"; }
  const auto r = p.wait(std::chrono::seconds(60));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("[rank 0]: done\n"), std::string::npos) << r.out;
}

TEST(TandemrunOutput, PartialLastLineIsFlushedAtExit) {
  const auto r = run_process({tandemrun_path(), "--nproc-per-node", "2", "/bin/sh", "-c",
                              "printf 'first\\nno newline %s' $RANK; printf 'e%s' $RANK >&2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto out = split_lines(r.out);
  std::sort(out.begin(), out.end());
  EXPECT_EQ(out, (std::vector<std::string>{"[rank 0]: first", "[rank 0]: no newline 0",
                                           "[rank 1]: first", "[rank 1]: no newline 1"}));
  auto err = split_lines(r.err);
  std::sort(err.begin(), err.end());
  EXPECT_EQ(err, (std::vector<std::string>{"[rank 0]: e0", "[rank 1]: e1"}));
}

}  // namespace
}  // namespace tandem::testing
