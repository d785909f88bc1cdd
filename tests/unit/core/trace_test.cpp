// The timeline writer: JSON escaping, the bounded ring, part files and their merge.
#include "core/trace.hpp"

#include "support/temp_dir.hpp"

#include <tandem/error.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <set>
#include <string>

namespace tandem::core::trace {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  EXPECT_TRUE(in.good()) << p;
  return json::parse(in);
}

// The events (not metadata) of a trace, in file order.
std::vector<json> events_of(const json& trace) {
  std::vector<json> out;
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") != "M") out.push_back(e);
  return out;
}

void record(Ring& ring, std::int64_t number, Clock::time_point start) {
  auto& e = ring.next();
  e.label = "allreduce";
  e.number = number;
  e.category = "collective";
  e.start = start;
  e.end = start + 3us;
  e.add("count", number * 2);
  e.add("dtype", std::string_view("f32"));
  e.add_flag("in_place", number % 2 == 0);
  ring.commit();
}

TEST(TraceJson, QuotesEscapesAndReplacesInvalidUtf8) {
  EXPECT_EQ(json_quote("plain"), R"("plain")");
  EXPECT_EQ(json_quote("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(json_quote("line\nnext\ttab\r"), R"("line\nnext\ttab\r")");
  EXPECT_EQ(json_quote(std::string("nul\0x", 5)), R"("nul\u0000x")");
  EXPECT_EQ(json_quote("\x01\x1f"), R"("\u0001\u001f")");
  EXPECT_EQ(json_quote("caf\xc3\xa9 \xe2\x82\xac"), "\"caf\xc3\xa9 \xe2\x82\xac\"");  // kept
  EXPECT_EQ(json_quote("bad \xff byte"), R"("bad \ufffd byte")");
  EXPECT_EQ(json_quote("cut \xe2\x82"), R"("cut \ufffd\ufffd")");
  EXPECT_EQ(json_quote("overlong \xc0\xaf"), R"("overlong \ufffd\ufffd")");
  // Whatever the bytes, a JSON parser reads back a string.
  std::string all;
  for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
  const json parsed = json::parse(json_quote(all));
  EXPECT_TRUE(parsed.is_string());
}

TEST(TraceRing, KeepsTheLastEventsInOrderAndWritesValidJson) {
  testing::TempDir dir;
  Sink sink(dir / "t.json", 16);
  sink.set_rank(3);
  EXPECT_EQ(sink.part_path(), dir / "t.json.rank3.json");
  {
    auto ring = sink.open(3, "collectives \"main\"");
    const auto t0 = Clock::now();
    for (int i = 0; i < 40; ++i) record(*ring, i, t0 + i * 10us);
    EXPECT_EQ(ring->recorded(), 40u);
    sink.flush();
    const json part = read_json(sink.part_path());
    const auto events = events_of(part);
    ASSERT_EQ(events.size(), 16u);
    for (std::size_t k = 0; k < events.size(); ++k) {
      const auto& e = events[k];
      EXPECT_EQ(e.at("name"), "allreduce #" + std::to_string(24 + k));
      EXPECT_EQ(e.at("ph"), "X");
      EXPECT_EQ(e.at("pid"), 3);
      EXPECT_EQ(e.at("args").at("count"), 2 * (24 + static_cast<int>(k)));
      EXPECT_EQ(e.at("args").at("dtype"), "f32");
      EXPECT_EQ(e.at("args").at("in_place"), k % 2 == 0);
      EXPECT_NEAR(e.at("dur").get<double>(), 3.0, 1e-9);
    }
    bool named = false;
    for (const auto& e : part.at("traceEvents"))
      if (e.at("ph") == "M" && e.at("name") == "thread_name")
        named = e.at("args").at("name") == "collectives \"main\"";
    EXPECT_TRUE(named);
  }
  // Destroying the ring hands its events to the sink: still in the file.
  const auto events = events_of(read_json(sink.part_path()));
  EXPECT_EQ(events.size(), 16u);
}

TEST(TraceRing, ErrorsQueuedSpansAndAsyncEvents) {
  testing::TempDir dir;
  Sink sink(dir / "t.json", 64);
  sink.set_rank(0);
  auto ring = sink.open(0, "collectives");
  const auto t0 = Clock::now();
  {
    auto& e = ring->next();
    e.label = "broadcast";
    e.number = 7;
    e.category = "collective";
    e.queued = t0;
    e.start = t0 + 5us;
    e.end = t0 + 9us;
    ring->set_error(e, "peer \"1\" lost\n");
    ring->commit();
  }
  {
    auto& e = ring->next();
    e.label = "send";
    e.category = "p2p";
    e.shape = Event::Shape::async;
    e.lane = 2;
    e.start = t0 + 10us;
    e.end = t0 + 20us;
    e.add("peer", 1);
    ring->commit();
  }
  ring->name_lane(2, "lane two");
  sink.flush();
  const auto events = events_of(read_json(sink.part_path()));
  ASSERT_EQ(events.size(), 5u);  // X + queue b/e + send b/e
  EXPECT_EQ(events[0].at("name"), "broadcast #7");
  EXPECT_EQ(events[0].at("args").at("error"), "peer \"1\" lost\n");
  EXPECT_NEAR(events[0].at("args").at("queued_us").get<double>(), 5.0, 1e-9);
  EXPECT_EQ(events[1].at("ph"), "b");
  EXPECT_EQ(events[1].at("cat"), "queue");
  EXPECT_EQ(events[2].at("ph"), "e");
  EXPECT_EQ(events[1].at("id"), events[2].at("id"));
  EXPECT_NEAR(events[2].at("ts").get<double>() - events[1].at("ts").get<double>(), 5.0, 0.01);
  EXPECT_EQ(events[3].at("name"), "send");
  EXPECT_EQ(events[3].at("ph"), "b");
  EXPECT_EQ(events[4].at("ph"), "e");
  EXPECT_EQ(events[3].at("tid"), events[0].at("tid").get<int>() + 2);
  EXPECT_NE(events[3].at("id"), events[1].at("id"));
  // Wall-clock microseconds: comparable across processes.
  const double now_us =
      std::chrono::duration<double, std::micro>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  EXPECT_NEAR(events[0].at("ts").get<double>(), now_us, 60e6);
}

TEST(TraceRing, AnOpenEventIsWrittenAsUnfinishedUntilClosed) {
  testing::TempDir dir;
  Sink sink(dir / "t.json", 16);
  sink.set_rank(0);
  auto ring = sink.open(0, "collectives");
  const auto t0 = Clock::now();
  auto& e = ring->next();
  e.label = "allreduce";
  e.number = 3;
  e.category = "collective";
  e.start = t0;
  e.end = t0;
  ring->mark_open();
  sink.flush();
  auto events = events_of(read_json(sink.part_path()));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].at("name"), "allreduce #3");
  EXPECT_EQ(events[0].at("args").at("unfinished"), true);
  EXPECT_GE(events[0].at("dur").get<double>(), 0.0);
  ring->close(t0 + 7us, "it failed");
  sink.flush();
  events = events_of(read_json(sink.part_path()));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_FALSE(events[0].at("args").contains("unfinished"));
  EXPECT_EQ(events[0].at("args").at("error"), "it failed");
  EXPECT_NEAR(events[0].at("dur").get<double>(), 7.0, 1e-9);
}

TEST(TraceMerge, TheMergedFileItselfIsNotAPart) {
  testing::TempDir dir;
  // A name longer than any short-string buffer: reading past its end is caught by ASan.
  const auto file = dir / "a-timeline-with-a-name-longer-than-thirty-two-bytes.json";
  std::ofstream(file) << "{}";  // merged by an earlier run
  std::ofstream(dir / "json") << "";
  std::ofstream(dir / ".json") << "";
  EXPECT_TRUE(find_parts(file).empty());
  {
    Sink sink(file, 10);
    sink.set_rank(0);
    auto ring = sink.open(0, "collectives");
    record(*ring, 0, Clock::now());
  }
  EXPECT_EQ(find_parts(file).size(), 1u);
}

TEST(TraceMerge, JoinsEveryRanksPartAndRemovesThem) {
  testing::TempDir dir;
  const auto file = dir / "job.json";
  for (int r = 0; r < 3; ++r) {
    Sink sink(file, 100);
    sink.set_rank(r);
    auto ring = sink.open(r, "collectives");
    for (int i = 0; i <= r; ++i) record(*ring, i, Clock::now());
  }  // each ring writes its part when destroyed
  std::ofstream(dir / "job.json.rank7.json.tmp123") << "partial";  // a killed writer's
  std::ofstream(dir / "other.json.rank0.json") << "another job";
  EXPECT_EQ(find_parts(file).size(), 3u);
  EXPECT_EQ(merge_parts(file, true), 3u);
  EXPECT_TRUE(find_parts(file).empty());
  EXPECT_FALSE(std::filesystem::exists(dir / "job.json.rank7.json.tmp123"));
  EXPECT_TRUE(std::filesystem::exists(dir / "other.json.rank0.json"));
  const json merged = read_json(file);
  std::map<int, int> per_pid;
  std::set<int> named;
  for (const auto& e : merged.at("traceEvents")) {
    if (e.at("ph") == "X") ++per_pid[e.at("pid").get<int>()];
    if (e.at("ph") == "M" && e.at("name") == "process_name") {
      named.insert(e.at("pid").get<int>());
      EXPECT_TRUE(e.at("args").at("name").get<std::string>().starts_with(
          "rank " + std::to_string(e.at("pid").get<int>()) + " ("));
    }
  }
  EXPECT_EQ(per_pid, (std::map<int, int>{{0, 1}, {1, 2}, {2, 3}}));
  // Rebased to the first event (exact in a double), the base kept.
  double first = 1e300;
  for (const auto& e : merged.at("traceEvents"))
    if (e.at("ph") == "X") first = std::min(first, e.at("ts").get<double>());
  EXPECT_EQ(first, 0.0);
  EXPECT_GT(std::stod(merged.at("otherData").at("ts_base_unix_us").get<std::string>()), 1.6e15);
  EXPECT_EQ(named, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(merge_parts(file, true), 0u);  // nothing left: the merged file stays
  EXPECT_TRUE(std::filesystem::exists(file));
}

TEST(TraceMerge, RejectsAPartItDidNotWrite) {
  testing::TempDir dir;
  const auto file = dir / "job.json";
  std::ofstream(dir / "job.json.rank0.json") << "{\"traceEvents\":[\n{\"ph\":\"X\"}\n";
  try {
    merge_parts(file, true);
    FAIL() << "a truncated part was merged";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Io);
    EXPECT_NE(e.message().find("job.json.rank0.json"), std::string::npos) << e.message();
  }
  EXPECT_TRUE(std::filesystem::exists(dir / "job.json.rank0.json"));
  EXPECT_FALSE(std::filesystem::exists(file));
}

}  // namespace
}  // namespace tandem::core::trace
