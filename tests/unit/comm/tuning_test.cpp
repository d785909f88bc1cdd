// Tuning files: parsing and validation (each kind of bad file names the file, the entry and
// the fix), context matching, and their place in the selector's precedence.

#include "comm/choice/tuning.hpp"

#include "comm/choice/policy.hpp"

#include <tandem/error.hpp>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tandem::comm {
namespace {

const algorithms::Registry& reg() {
  return algorithms::Registry::builtin();
}

// An entry for 2 ranks on one host over shm; `allreduce` is the JSON list of its ranges.
std::string file_text(const std::string& allreduce,
                      const std::string& context = R"("world_size": 2, "hosts": 1,
                                                       "transport": "shm")") {
  return R"({"tandem_tuning": 1, "entries": [{"context": {)" + context +
         R"(}, "collectives": {"allreduce": )" + allreduce + "}}]}";
}

const std::string kGood = R"({
  "tandem_tuning": 1,
  "entries": [
    {"context": {"world_size": 2, "hosts": 1, "transport": "shm", "dtype": "f32",
                 "date": "2026-01-01T00:00:00Z", "tandem_version": "0.1.0"},
     "collectives": {
       "allreduce": [{"from": 0, "to": 1024, "algorithm": "ring"},
                     {"from": "1K", "to": "1M", "algorithm": "tree"},
                     {"from": 1048576, "to": null, "algorithm": "rabenseifner"}],
       "reduce_scatter": [{"from": 0, "algorithm": "recursive_halving"}]},
     "measurements": {"allreduce": []}},
    {"context": {"world_size": 2, "hosts": 1, "transport": "tcp"},
     "collectives": {"broadcast": [{"from": 64, "to": 128, "algorithm": "ring"}]}}
  ]
})";

/// The message of the InvalidArgument that parsing `text` throws ("" when it does not).
std::string parse_error(const std::string& text) {
  try {
    parse_tuning(text, "/tmp/t.json", reg());
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    EXPECT_NE(e.message().find("TANDEM_TUNING_FILE=/tmp/t.json"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("tandem-perf --tune"), std::string::npos) << e.message();
    return e.message();
  }
  ADD_FAILURE() << "accepted: " << text;
  return {};
}

bool has(const std::string& s, std::string_view what) {
  return s.find(what) != std::string::npos;
}

TEST(Tuning, ParsesAGoodFile) {
  const TuningFile f = parse_tuning(kGood, "/tmp/t.json", reg());
  ASSERT_EQ(f.entries.size(), 2u);
  const TuningEntry* shm = f.match({2, 1, "shm"});
  ASSERT_NE(shm, nullptr);
  const auto name = [&](std::size_t bytes) {
    const auto* a = shm->lookup(CollectiveKind::allreduce, bytes);
    return a == nullptr ? std::string("none") : std::string(a->name());
  };
  EXPECT_EQ(name(0), "ring");
  EXPECT_EQ(name(1023), "ring");
  EXPECT_EQ(name(1024), "tree");
  EXPECT_EQ(name((1u << 20) - 1), "tree");
  EXPECT_EQ(name(1u << 20), "rabenseifner");
  EXPECT_EQ(name(std::size_t{1} << 40), "rabenseifner");
  EXPECT_EQ(shm->lookup(CollectiveKind::broadcast, 64), nullptr);
  const TuningEntry* tcp = f.match({2, 1, "tcp"});
  ASSERT_NE(tcp, nullptr);
  EXPECT_EQ(tcp->lookup(CollectiveKind::broadcast, 63), nullptr);
  EXPECT_EQ(tcp->lookup(CollectiveKind::broadcast, 127)->name(), "ring");
  EXPECT_EQ(tcp->lookup(CollectiveKind::broadcast, 128), nullptr);
  EXPECT_NE(shm->digest(), tcp->digest());
}

TEST(Tuning, ContextMustMatchExactly) {
  const TuningFile f = parse_tuning(kGood, "/tmp/t.json", reg());
  EXPECT_EQ(f.match({3, 1, "shm"}), nullptr);
  EXPECT_EQ(f.match({2, 2, "shm"}), nullptr);
  EXPECT_EQ(f.match({2, 1, "shm+tcp"}), nullptr);
}

TEST(Tuning, RejectsMalformedJson) {
  EXPECT_TRUE(has(parse_error("{\"tandem_tuning\": 1, "), "not valid JSON"));
  EXPECT_TRUE(has(parse_error("[]"), "top level"));
}

TEST(Tuning, RejectsAnotherFormatVersion) {
  EXPECT_TRUE(has(parse_error(R"({"tandem_tuning": 2, "entries": []})"), "format version"));
  EXPECT_TRUE(has(parse_error(R"({"entries": []})"), "'tandem_tuning'"));
}

TEST(Tuning, RejectsUnknownCollective) {
  const std::string m = parse_error(
      R"({"tandem_tuning": 1, "entries": [{"context": {"world_size": 2, "hosts": 1,
      "transport": "shm"}, "collectives": {"allreduse": []}}]})");
  EXPECT_TRUE(has(m, "entry 0 (2 ranks on 1 host over shm)")) << m;
  EXPECT_TRUE(has(m, "unknown collective 'allreduse'")) << m;
}

TEST(Tuning, RejectsUnknownAlgorithm) {
  const std::string m = parse_error(file_text(R"([{"from": 0, "algorithm": "bruck"}])"));
  EXPECT_TRUE(has(m, "allreduce range 0")) << m;
  EXPECT_TRUE(has(m, "no algorithm named 'bruck'")) << m;
  EXPECT_TRUE(has(m, "recursive_doubling")) << m;  // the known names
}

TEST(Tuning, RejectsOverlappingOrUnsortedRanges) {
  const std::string overlap = parse_error(file_text(
      R"([{"from": 0, "to": 1024, "algorithm": "ring"}, {"from": 512, "algorithm": "tree"}])"));
  EXPECT_TRUE(has(overlap, "allreduce range 1")) << overlap;
  EXPECT_TRUE(has(overlap, "overlap or are not sorted")) << overlap;
  const std::string unsorted = parse_error(file_text(
      R"([{"from": 1024, "to": 2048, "algorithm": "ring"}, {"from": 0, "to": 64,
          "algorithm": "tree"}])"));
  EXPECT_TRUE(has(unsorted, "overlap or are not sorted")) << unsorted;
  const std::string after_open =
      parse_error(file_text(R"([{"from": 0, "algorithm": "ring"}, {"from": 4096,
                                  "algorithm": "tree"}])"));
  EXPECT_TRUE(has(after_open, "infinity")) << after_open;
  const std::string empty =
      parse_error(file_text(R"([{"from": 1024, "to": 1024, "algorithm": "ring"}])"));
  EXPECT_TRUE(has(empty, "empty range")) << empty;
}

TEST(Tuning, RejectsBoundsThatAreNotPowersOfTwo) {
  const std::string m = parse_error(file_text(R"([{"from": 0, "to": 1000, "algorithm": "ring"}])"));
  EXPECT_TRUE(has(m, "'to' is 1000, not 0 or a power of two")) << m;
  EXPECT_TRUE(has(parse_error(file_text(R"([{"from": "3K", "algorithm": "ring"}])")),
                  "not 0 or a power of two"));
  EXPECT_TRUE(
      has(parse_error(file_text(R"([{"from": -4, "algorithm": "ring"}])")), "not a byte count"));
  EXPECT_TRUE(has(parse_error(file_text(R"([{"from": "lots", "algorithm": "ring"}])")),
                  "not a byte count"));
}

TEST(Tuning, RejectsBadContextsAndFields) {
  EXPECT_TRUE(
      has(parse_error(file_text("[]", R"("world_size": 2, "hosts": 1)")), "context.transport"));
  EXPECT_TRUE(has(parse_error(file_text("[]", R"("world_size": 0, "hosts": 1,
                                                  "transport": "shm")")),
                  "context.world_size"));
  EXPECT_TRUE(has(parse_error(file_text("[]", R"("world_size": 2, "hosts": 3,
                                                  "transport": "tcp")")),
                  "exceeds world_size"));
  EXPECT_TRUE(has(parse_error(file_text("[]", R"("world_size": 2, "hosts": 1,
                                                  "transport": "rdma")")),
                  "context.transport"));
  EXPECT_TRUE(has(parse_error(file_text(R"([{"from": 0, "algo": "ring", "algorithm": "ring"}])")),
                  "unknown field 'algo'"));
  EXPECT_TRUE(has(parse_error(R"({"tandem_tuning": 1, "entries": [{"context": {"world_size": 2,
      "hosts": 1, "transport": "shm"}, "collective": {}}]})"),
                  "unknown field 'collective'"));
  const std::string twice = parse_error(
      R"({"tandem_tuning": 1, "entries": [
        {"context": {"world_size": 2, "hosts": 1, "transport": "shm"}, "collectives": {}},
        {"context": {"world_size": 2, "hosts": 1, "transport": "shm"}, "collectives": {}}]})");
  EXPECT_TRUE(has(twice, "entry 1")) << twice;
  EXPECT_TRUE(has(twice, "same context as entry 0")) << twice;
}

TEST(Tuning, LoadNamesAMissingFile) {
  try {
    load_tuning_file("/nonexistent/tuning.json");
    ADD_FAILURE() << "loaded a missing file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_TRUE(has(e.message(), "/nonexistent/tuning.json")) << e.message();
  }
}

TEST(Tuning, ContextFromHostsAndLinks) {
  using transport::Link;
  const std::vector<std::string> one_host{"a", "a"};
  const std::vector<Link> shm{Link::self, Link::shm};
  const std::vector<Link> tcp{Link::self, Link::tcp};
  EXPECT_EQ(tuning_context(one_host, 0, shm), (TuningContext{2, 1, "shm"}));
  EXPECT_EQ(tuning_context(one_host, 0, tcp), (TuningContext{2, 1, "tcp"}));
  const std::vector<std::string> two_hosts{"a", "a", "b", "b"};
  EXPECT_EQ(tuning_context(two_hosts, 0, std::vector{Link::self, Link::shm, Link::tcp, Link::tcp}),
            (TuningContext{4, 2, "shm+tcp"}));
  const std::vector<std::string> spread{"a", "b"};
  EXPECT_EQ(tuning_context(spread, 1, std::vector{Link::tcp, Link::self}),
            (TuningContext{2, 2, "tcp"}));
}

// The precedence: per call > forced (TANDEM_ALGO) > tuning file > built-in.
TEST(Tuning, PrecedenceInThePolicy) {
  auto file = std::make_shared<const TuningFile>(parse_tuning(kGood, "/tmp/t.json", reg()));
  const TuningEntry* entry = file->match({2, 1, "shm"});
  ASSERT_NE(entry, nullptr);
  const auto small = probe_call(CollectiveKind::allreduce, 8, 2);
  AlgoPolicy plain;
  EXPECT_EQ(plain.choose(reg(), small, 2, {}).name(), "recursive_doubling");  // built-in

  AlgoPolicy tuned;
  tuned.set_tuning(file, entry);
  EXPECT_EQ(tuned.choose(reg(), small, 2, {}).name(), "ring");
  EXPECT_EQ(tuned.choose(reg(), small, 2, {}).name(), "ring");  // cached alike
  EXPECT_EQ(tuned.choose(reg(), probe_call(CollectiveKind::allreduce, 4096, 2), 2, {}).name(),
            "tree");
  // Sizes and collectives the entry does not cover keep the built-in choice.
  EXPECT_EQ(tuned.choose(reg(), probe_call(CollectiveKind::broadcast, 8, 2), 2, {}).name(),
            plain.choose(reg(), probe_call(CollectiveKind::broadcast, 8, 2), 2, {}).name());
  EXPECT_EQ(tuned.choose(reg(), small, 2, "rabenseifner").name(), "rabenseifner");

  AlgoPolicy forced("allreduce=tree", "TANDEM_ALGO", reg());
  forced.set_tuning(file, entry);
  EXPECT_EQ(forced.choose(reg(), small, 2, {}).name(), "tree");
  EXPECT_EQ(forced.choose(reg(), small, 2, "rabenseifner").name(), "rabenseifner");
  // A forced name for another collective leaves the tuning in charge of this one.
  AlgoPolicy other("broadcast=ring", "TANDEM_ALGO", reg());
  other.set_tuning(file, entry);
  EXPECT_EQ(other.choose(reg(), small, 2, {}).name(), "ring");

  // Copies keep the tuning.
  AlgoPolicy copy(tuned);
  EXPECT_EQ(copy.choose(reg(), small, 2, {}).name(), "ring");
  AlgoPolicy assigned;
  assigned = tuned;
  EXPECT_EQ(assigned.choose(reg(), small, 2, {}).name(), "ring");
  EXPECT_EQ(assigned.tuning(), entry);
}

TEST(Tuning, AnAlgorithmThatDoesNotSupportTheCallFallsBack) {
  auto file = std::make_shared<const TuningFile>(parse_tuning(kGood, "/tmp/t.json", reg()));
  AlgoPolicy tuned;
  tuned.set_tuning(file, file->match({2, 1, "shm"}));
  // recursive_halving needs a power-of-two world: on 3 ranks the built-in choice runs.
  const auto call = probe_call(CollectiveKind::reduce_scatter, 3 * 1024, 3);
  EXPECT_EQ(tuned.choose(reg(), call, 3, {}).name(), reg().default_choice(call, 3).name());
  EXPECT_EQ(
      tuned.choose(reg(), probe_call(CollectiveKind::reduce_scatter, 1u << 20, 2), 2, {}).name(),
      "recursive_halving");
}

}  // namespace
}  // namespace tandem::comm
