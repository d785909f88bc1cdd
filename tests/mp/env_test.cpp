// Communicator::from_env under the launchers' conventions, and the one-rank communicator.

#include "mp_util.hpp"
#include "sweep.hpp"

#include <tandem/error.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

namespace tandem::mptest {
namespace {

// A port that was free a moment ago (the store binds it again in rank 0).
std::uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Clears every launcher variable a test process might have inherited.
void clear_launcher_env() {
  for (const char* v :
       {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
        "SLURM_STEP_TASKS_PER_NODE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE",
        "TANDEM_STORE_ADDR"})
    ::unsetenv(v);
}

void set(const char* name, const std::string& value) {
  ::setenv(name, value.c_str(), 1);
}

// Every rank: the communicator has the launcher's rank and size, and works.
void check_world(Communicator& comm, int rank, int size) {
  EXPECT_EQ(comm.rank(), rank);
  EXPECT_EQ(comm.size(), size);
  EXPECT_EQ(comm.local_rank(), rank);
  EXPECT_EQ(comm.local_size(), size);
  std::vector<std::int64_t> v{rank};
  comm.allreduce(BufferView::of(std::span<std::int64_t>(v)), ReduceOp::sum);
  EXPECT_EQ(v[0], static_cast<std::int64_t>(size) * (size - 1) / 2);
}

enum class Style { torchrun, slurm, ompi, pmi };

void launch_env(Style style, int rank, int size, std::uint16_t port) {
  clear_launcher_env();
  set("MASTER_ADDR", "127.0.0.1");
  set("MASTER_PORT", std::to_string(port));
  set("TANDEM_STORE_TOKEN", "from-env-token");
  const auto r = std::to_string(rank);
  const auto n = std::to_string(size);
  switch (style) {
    case Style::torchrun:
      set("RANK", r), set("WORLD_SIZE", n), set("LOCAL_RANK", r), set("LOCAL_WORLD_SIZE", n);
      return;
    case Style::slurm:
      set("SLURM_PROCID", r), set("SLURM_NTASKS", n), set("SLURM_LOCALID", r);
      set("SLURM_STEP_TASKS_PER_NODE", n + "(x1)");
      return;
    case Style::ompi:
      set("OMPI_COMM_WORLD_RANK", r), set("OMPI_COMM_WORLD_SIZE", n);
      set("OMPI_COMM_WORLD_LOCAL_RANK", r), set("OMPI_COMM_WORLD_LOCAL_SIZE", n);
      return;
    case Style::pmi:
      set("PMI_RANK", r), set("PMI_SIZE", n);
      return;
  }
}

class FromEnv : public ::testing::TestWithParam<Style> {};

TEST_P(FromEnv, RankZeroHostsTheStore) {
  const Style style = GetParam();
  const std::uint16_t port = free_port();
  const auto exits = testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        launch_env(style, ctx.rank, ctx.size, port);
        auto comm = Communicator::from_env();
        check_world(*comm, ctx.rank, ctx.size);
        comm->barrier();  // rank 0 keeps the store up until everyone is done with it
      },
      run_options("shm"));
  testing::expect_all_ok(exits);
}

std::string style_name(const ::testing::TestParamInfo<Style>& p) {
  const char* names[] = {"torchrun", "slurm", "ompi", "pmi"};
  return names[static_cast<int>(p.param)];
}

INSTANTIATE_TEST_SUITE_P(Launchers, FromEnv,
                         ::testing::Values(Style::torchrun, Style::slurm, Style::ompi, Style::pmi),
                         style_name);

TEST(FromEnvAgent, EveryRankIsAClientOfTheLaunchersStore) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        // MASTER_PORT is the workers' own port under tandemrun: nothing listens there.
        launch_env(Style::torchrun, ctx.rank, ctx.size, 1);
        set("TANDEM_STORE_ADDR", "127.0.0.1:" + std::to_string(ctx.store_port));
        set("TANDEM_STORE_TOKEN", ctx.store_token);
        auto comm = Communicator::from_env();
        check_world(*comm, ctx.rank, ctx.size);
      },
      run_options("tcp"));
  testing::expect_all_ok(exits);
}

TEST(FromEnvErrors, ClearMessagesAndSingleRankFallback) {
  const auto exits = testing::run_ranks(
      1,
      [&](const testing::RankContext&) {
        const auto expect_invalid = [](std::string_view needle) {
          try {
            Communicator::from_env();
            ADD_FAILURE() << "from_env succeeded; expected an error containing '" << needle << "'";
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
            EXPECT_NE(e.message().find(needle), std::string::npos) << e.what();
          }
        };
        clear_launcher_env();
        set("RANK", "0"), set("WORLD_SIZE", "2");
        expect_invalid("set MASTER_ADDR and MASTER_PORT, or launch with tandemrun");
        set("MASTER_PORT", "29500"), set("RANK", "5"), set("WORLD_SIZE", "4");
        expect_invalid("RANK=5 is not below WORLD_SIZE=4");
        set("RANK", "1"), set("WORLD_SIZE", "abc");
        expect_invalid("WORLD_SIZE='abc' is not a number");
        set("WORLD_SIZE", "2"), set("MASTER_PORT", "70000");
        expect_invalid("MASTER_PORT='70000'");
        set("TANDEM_STORE_ADDR", "no-port-here");
        expect_invalid("TANDEM_STORE_ADDR='no-port-here' is not host:port");
        clear_launcher_env();
        set("RANK", "0");
        expect_invalid("RANK is set (0) but WORLD_SIZE is not");
        clear_launcher_env();
        set("OMPI_COMM_WORLD_SIZE", "2");
        expect_invalid("OMPI_COMM_WORLD_SIZE is set (2) but OMPI_COMM_WORLD_RANK is not");

        // A malformed setting read only at the first large broadcast fails the setup instead.
        clear_launcher_env();
        set("TANDEM_CMA", "maybe");
        expect_invalid("TANDEM_CMA='maybe'");
        ::unsetenv("TANDEM_CMA");

        // No launcher at all: a single rank, no store, no port.
        clear_launcher_env();
        auto comm = Communicator::from_env();
        EXPECT_EQ(comm->size(), 1);
        EXPECT_EQ(comm->rank(), 0);
        // WORLD_SIZE=1 needs no MASTER_PORT either.
        set("RANK", "0"), set("WORLD_SIZE", "1");
        EXPECT_EQ(Communicator::from_env()->size(), 1);
      },
      run_options("shm"));
  testing::expect_all_ok(exits);
}

// ---- one rank: every collective is a local copy -----------------------------------------

TEST(SingleRank, EveryCollectiveWorksWithAHashStore) {
  auto comm = Communicator::create(std::make_shared<store::HashStore>(), 0, 1);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->local_rank(), 0);
  EXPECT_EQ(comm->local_size(), 1);
  EXPECT_EQ(comm->transport_to(0), "self");
  EXPECT_EQ(comm->algorithm_for(CollectiveKind::allreduce, 1 << 20), "local");
  EXPECT_EQ(comm->last_algorithm(), "local");
  Sweep sweep(*comm);
  sweep.small();
  sweep.large();
  EXPECT_GT(sweep.checks(), 1000);
  EXPECT_EQ(sweep.skipped(), 0);
  // Asynchronous forms too.
  std::vector<float> v{1.0f, 2.0f}, out(2);
  auto w = comm->allreduce_async(BufferView::of(std::span<float>(v)),
                                 BufferView::of(std::span<float>(out)), ReduceOp::avg);
  w->wait();
  EXPECT_EQ(out[1], 2.0f);
  comm->barrier_async()->wait();
  auto sub = comm->split(0, 0);
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->size(), 1);
  EXPECT_EQ(comm->split(-1, 0), nullptr);
}

}  // namespace
}  // namespace tandem::mptest
