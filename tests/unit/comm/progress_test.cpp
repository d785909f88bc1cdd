// Progress records (what ranks publish for stall and culprit reports) and their diagnosis.

#include "comm/diag/progress.hpp"

#include "transport/bootstrap.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

namespace tandem::comm {
namespace {

bool contains(const std::string& s, std::string_view what) {
  return s.find(what) != std::string::npos;
}

ProgressRecord record(int rank, std::uint64_t entered, std::uint64_t done,
                      CollectiveKind kind = CollectiveKind::allreduce, std::uint64_t count = 1000) {
  ProgressRecord r;
  r.rank = rank;
  r.host = "node-a";
  r.pid = 100 + rank;
  r.entered = entered;
  r.done = done;
  r.kind = kind;
  r.dtype = DataType::f32;
  r.count = count;
  r.since_ms = 1'700'000'000'000 + rank;
  return r;
}

TEST(ProgressRecord, RoundTripsIncludingErrorAndRecentLines) {
  ProgressRecord r = record(3, 1235, 1234, CollectiveKind::broadcast);
  r.root = 2;
  r.error = "allreduce #1234 failed:\nrank 2 died";
  r.recent = {"#1233 allreduce f32 x 8 ring 12:00:00.000 ok", "#1234 broadcast running"};
  const auto back = ProgressRecord::decode(r.encode());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->rank, 3);
  EXPECT_EQ(back->host, "node-a");
  EXPECT_EQ(back->pid, 103);
  EXPECT_EQ(back->entered, 1235u);
  EXPECT_EQ(back->done, 1234u);
  EXPECT_EQ(back->kind, CollectiveKind::broadcast);
  EXPECT_EQ(back->root, 2);
  EXPECT_EQ(back->since_ms, r.since_ms);
  EXPECT_EQ(back->error, "allreduce #1234 failed: rank 2 died");  // one line
  EXPECT_EQ(back->recent, r.recent);
  EXPECT_EQ(back->current(), "broadcast #1234 (f32 x 1000, root 2)");
}

TEST(ProgressRecord, RejectsWhatIsNotARecord) {
  for (const char* text :
       {"", "rank=1\nentered=2\ndone=1\n", "tandem-progress=1\nrank=x\n",
        "tandem-progress=1\nrank=1\nentered=1\ndone=2\n", "tandem-progress=1\nrank=1\nentered=2\n",
        "tandem-progress=1\nnoequals\n", "tandem-progress=1\nrank=1\nentered=2\ndone=1\nop=fly\n"})
    EXPECT_FALSE(ProgressRecord::decode(text).has_value()) << text;
}

TEST(Diagnose, NamesTheRankThatNeverEntered) {
  std::vector<std::optional<ProgressRecord>> rs = {record(0, 1235, 1234), record(1, 1235, 1234),
                                                   record(2, 1234, 1234), record(3, 1235, 1234)};
  const auto text = diagnose(rs);
  ASSERT_TRUE(text.has_value());
  EXPECT_TRUE(contains(*text, "allreduce #1234 (f32 x 1000): ranks 0,1,3 waiting in it since"))
      << *text;
  EXPECT_TRUE(contains(*text, "rank 2 never entered it (last completed #1233)")) << *text;
}

// A rank that has published no record yet stands for "entered none" through its address
// record; anything else is not taken for one.
TEST(ProgressRecord, FromAnAddressRecordEnteredNone) {
  transport::RankRecord a;
  a.info.host = "node-b";
  a.info.host_id = "node-b/boot/1";
  a.info.pid = 4242;
  a.address = "10.0.0.2";
  a.port = 29500;
  const auto r = ProgressRecord::from_address(transport::encode_record(a), 7);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->rank, 7);
  EXPECT_EQ(r->host, "node-b");
  EXPECT_EQ(r->pid, 4242);
  EXPECT_FALSE(r->inside());
  EXPECT_EQ(r->done, 0u);
  const auto again = ProgressRecord::decode(r->encode());
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->pid, 4242);
  EXPECT_FALSE(ProgressRecord::from_address("tandem-addr-1\nold", 7).has_value());
  EXPECT_FALSE(ProgressRecord::from_address(record(7, 1, 0).encode(), 7).has_value());
  std::vector<std::optional<ProgressRecord>> rs = {record(0, 1, 0), *r};
  rs[1]->rank = 1;
  const auto text = diagnose(rs);
  ASSERT_TRUE(text.has_value());
  EXPECT_TRUE(contains(*text, "rank 1 never entered it (completed no collective)")) << *text;
}

TEST(Diagnose, MismatchedCallsAreShownSideBySide) {
  std::vector<std::optional<ProgressRecord>> rs = {
      record(0, 8, 7), record(1, 8, 7, CollectiveKind::broadcast), record(2, 8, 7)};
  const auto text = diagnose(rs);
  ASSERT_TRUE(text.has_value());
  EXPECT_TRUE(contains(*text, "collective #7: the ranks disagree")) << *text;
  EXPECT_TRUE(contains(*text, "ranks 0,2 called allreduce (f32 x 1000)")) << *text;
  EXPECT_TRUE(contains(*text, "rank 1 called broadcast (f32 x 1000, root 0)")) << *text;
}

TEST(Diagnose, BehindCompletedSilentAndLostRanks) {
  std::vector<std::optional<ProgressRecord>> rs = {
      record(0, 10, 9), record(1, 9, 8), record(2, 11, 11), std::nullopt, record(4, 0, 0)};
  const std::vector<bool> lost = {false, true, false, false, false};
  const auto text = diagnose(rs, lost);
  ASSERT_TRUE(text.has_value());
  EXPECT_TRUE(contains(*text, "allreduce #9 (f32 x 1000): rank 0 waiting")) << *text;
  EXPECT_TRUE(contains(*text, "rank 1 is still in allreduce #8")) << *text;
  EXPECT_TRUE(contains(*text, "rank 2 completed it")) << *text;
  EXPECT_TRUE(contains(*text, "rank 3 reported no progress")) << *text;
  EXPECT_TRUE(contains(*text, "rank 4 never entered it (completed no collective)")) << *text;
  EXPECT_TRUE(contains(*text, "rank 1 died")) << *text;
}

TEST(Diagnose, NothingInsideACollective) {
  std::vector<std::optional<ProgressRecord>> rs = {record(0, 5, 5), record(1, 5, 5)};
  EXPECT_FALSE(diagnose(rs).has_value());
}

}  // namespace
}  // namespace tandem::comm
