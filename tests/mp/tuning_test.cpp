// TANDEM_TUNING_FILE in real communicators: an entry for the communicator's context steers
// algorithm_for() and the calls; TANDEM_ALGO and per-call names win over it; entries of
// other contexts are ignored; a bad file or ranks that disagree fail at creation.

#include "mp_util.hpp"
#include "support/temp_dir.hpp"

#include <tandem/error.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace tandem::mptest {
namespace {

// ring for allreduce calls below 16 bytes, tree for broadcast below 64, in one context.
std::string entry(int world, const std::string& transport) {
  return "{\"context\": {\"world_size\": " + std::to_string(world) +
         ", \"hosts\": 1, \"transport\": \"" + transport +
         "\"}, \"collectives\": {\"allreduce\": [{\"from\": 0, \"to\": 16, \"algorithm\": "
         "\"ring\"}], \"broadcast\": [{\"from\": 0, \"to\": 64, \"algorithm\": \"ring\"}]}}";
}

std::string write(const testing::TempDir& dir, const std::string& name,
                  const std::vector<std::string>& entries) {
  std::string text = "{\"tandem_tuning\": 1, \"entries\": [";
  for (std::size_t i = 0; i < entries.size(); ++i) text += (i ? ", " : "") + entries[i];
  text += "]}";
  const std::string path = dir.file(name);
  std::ofstream(path) << text;
  return path;
}

void expect_sum(Communicator& comm, int world, const CallOptions& o = {}) {
  std::vector<float> v(2, 1.0f);
  comm.allreduce(BufferView::of(std::span<float>(v)), ReduceOp::sum, o);
  EXPECT_EQ(v[0], static_cast<float>(world));
  EXPECT_EQ(v[1], static_cast<float>(world));
}

class TuningFileTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TuningFileTest, AppliesTheEntryOfItsContext) {
  const testing::TempDir dir;
  const std::string transport = GetParam();
  const std::string other = transport == "shm" ? "tcp" : "shm";
  // Entries for another world size and another transport are ignored.
  const std::string path =
      write(dir, "t.json", {entry(3, transport), entry(2, other), entry(2, transport)});
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        EXPECT_EQ(comm->algorithm_for(CollectiveKind::allreduce, 8), "ring");
        EXPECT_EQ(comm->algorithm_for(CollectiveKind::broadcast, 32), "ring");
        // Beyond the ranges: the built-in choices.
        EXPECT_EQ(comm->algorithm_for(CollectiveKind::allreduce, 16), "recursive_doubling");
        EXPECT_EQ(comm->algorithm_for(CollectiveKind::broadcast, 64), "tree");
        expect_sum(*comm, 2);
        // A per-call name wins over the file.
        expect_sum(*comm, 2, {{}, "tree"});
      },
      run_options(transport, {"TANDEM_TUNING_FILE=" + path}));
  testing::expect_all_ok(exits);
}

INSTANTIATE_TEST_SUITE_P(Transports, TuningFileTest, ::testing::Values("shm", "tcp"),
                         transport_name);

TEST(TuningFile, TandemAlgoWinsOverIt) {
  const testing::TempDir dir;
  const std::string path = write(dir, "t.json", {entry(2, "shm")});
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        EXPECT_EQ(comm->algorithm_for(CollectiveKind::allreduce, 8), "tree");
        EXPECT_EQ(comm->algorithm_for(CollectiveKind::broadcast, 32), "ring");  // tuned
        expect_sum(*comm, 2);
        expect_sum(*comm, 2, {{}, "rabenseifner"});
      },
      run_options("shm", {"TANDEM_TUNING_FILE=" + path, "TANDEM_ALGO=allreduce=tree"}));
  testing::expect_all_ok(exits);
}

TEST(TuningFile, NoMatchingContextKeepsTheBuiltInChoices) {
  const testing::TempDir dir;
  const std::string path = write(dir, "t.json", {entry(3, "shm"), entry(2, "tcp")});
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        EXPECT_EQ(comm->algorithm_for(CollectiveKind::allreduce, 8), "recursive_doubling");
        EXPECT_EQ(comm->algorithm_for(CollectiveKind::broadcast, 32), "tree");
        expect_sum(*comm, 2);
      },
      run_options("shm", {"TANDEM_TUNING_FILE=" + path}));
  testing::expect_all_ok(exits);
}

TEST(TuningFile, AnInvalidFileFailsCreationNamingIt) {
  const testing::TempDir dir;
  const std::string path = dir.file("bad.json");
  std::ofstream(path) << R"({"tandem_tuning": 1, "entries": [{"context": {"world_size": 2,
      "hosts": 1, "transport": "shm"}, "collectives": {"allreduce": [{"from": 0, "to": 100,
      "algorithm": "ring"}]}}]})";
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        try {
          auto comm = connect(ctx);
          ADD_FAILURE() << "a communicator was created with an invalid tuning file";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
          EXPECT_NE(e.message().find(path), std::string::npos) << e.message();
          EXPECT_NE(e.message().find("power of two"), std::string::npos) << e.message();
        }
      },
      run_options("shm", {"TANDEM_TUNING_FILE=" + path}));
  testing::expect_all_ok(exits);
}

TEST(TuningFile, RanksThatApplyDifferentEntriesFailAtCreation) {
  const testing::TempDir dir;
  const std::string path = write(dir, "t.json", {entry(2, "shm")});
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        if (ctx.rank == 1) ::unsetenv("TANDEM_TUNING_FILE");
        // Rank 1 refuses; rank 0, whose tuning was its own, learns it in setup's first
        // exchange after connecting (the one-copy algorithms' warm-up on shared memory).
        try {
          auto comm = connect(ctx);
          ADD_FAILURE() << "rank " << ctx.rank << " created a communicator";
        } catch (const Error& e) {
          if (ctx.rank == 1) {
            EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
            EXPECT_NE(e.message().find("same TANDEM_TUNING_FILE"), std::string::npos)
                << e.message();
          } else {
            EXPECT_EQ(e.code(), ErrorCode::PeerLost) << e.what();
            EXPECT_NE(e.message().find("a peer stopped before setup was complete"),
                      std::string::npos)
                << e.message();
            EXPECT_NE(e.message().find("rank 1"), std::string::npos) << e.message();
          }
        }
      },
      run_options("shm", {"TANDEM_TUNING_FILE=" + path}));
  testing::expect_all_ok(exits);
}

TEST(TuningFile, ABadFileOnRankZeroFailsTheOthersAtOnce) {
  const testing::TempDir dir;
  const std::string good = write(dir, "good.json", {entry(2, "shm")});
  const std::string bad = dir.file("bad.json");
  std::ofstream(bad) << "{ not json";
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        ::setenv("TANDEM_TUNING_FILE", ctx.rank == 0 ? bad.c_str() : good.c_str(), 1);
        try {
          auto comm = connect(ctx);
          ADD_FAILURE() << "rank " << ctx.rank << " created a communicator";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
          EXPECT_NE(e.message().find(bad), std::string::npos) << e.message();
          if (ctx.rank == 1) {
            EXPECT_NE(e.message().find("rank 0 could not apply"), std::string::npos) << e.message();
          }
        }
      },
      run_options("shm"));
  testing::expect_all_ok(exits);
}

}  // namespace
}  // namespace tandem::mptest
