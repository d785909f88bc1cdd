// Ranks on several "hosts" of one machine (CommOptions::host_label): shared memory inside a
// host, tcp between hosts, and the hierarchical allreduce chosen for the bandwidth range.
// Every dtype x op x awkward count against the independent reference, with the selector's
// choice and with hierarchical forced; a rank dying on the other host fails every survivor
// with PeerLost. (Real network namespaces: tests/tools/netfault_test.cpp.)

#include "mp_util.hpp"
#include "sweep.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <signal.h>
#include <string>
#include <vector>

namespace tandem::mptest {
namespace {

using namespace std::chrono_literals;

struct Layout {
  const char* name;
  std::vector<int> host_of;  ///< emulated host of each rank
  const char* large_choice;  ///< the selector's allreduce choice for 1 MiB
};

void PrintTo(const Layout& l, std::ostream* os) {
  *os << l.name;
}

CommOptions on_host(const Layout& l, int rank) {
  CommOptions o;
  o.host_label = fmt::format("h{}", l.host_of[static_cast<std::size_t>(rank)]);
  return o;
}

class Hierarchical : public ::testing::TestWithParam<Layout> {};

TEST_P(Hierarchical, AllreduceMatchesReferenceOnEveryRank) {
  const Layout& layout = GetParam();
  const int world = static_cast<int>(layout.host_of.size());
  const auto exits = testing::run_ranks(
      world,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx, on_host(layout, ctx.rank));
        const int mine = layout.host_of[static_cast<std::size_t>(ctx.rank)];
        int local = 0;
        for (int p = 0; p < ctx.size; ++p) {
          const int host = layout.host_of[static_cast<std::size_t>(p)];
          local += host == mine;
          const std::string want = p == ctx.rank ? "self" : host == mine ? "shm" : "tcp";
          EXPECT_EQ(comm->transport_to(p), want) << "peer " << p;
        }
        EXPECT_EQ(comm->local_size(), local);
        EXPECT_EQ(comm->algorithm_for(CollectiveKind::allreduce, 1u << 20), layout.large_choice);
        EXPECT_EQ(comm->algorithm_for(CollectiveKind::allreduce, 256u << 20), layout.large_choice);
        EXPECT_EQ(comm->algorithm_for(CollectiveKind::allreduce, 8), "recursive_doubling");

        Sweep sweep(*comm);
        const std::size_t w = static_cast<std::size_t>(ctx.size);
        const std::vector<std::size_t> counts{0, 1, 2, 7, 13, w - 1, w + 1, 3 * w + 2, 1031, 4099};
        const std::size_t prime = lean_sweep() ? 162473 : 1299709;
        for (const std::string algo : {"", "hierarchical"}) {
          for (DataType t : sweep_types())
            for (ReduceOp op : kAllReduceOps)
              for (std::size_t n : counts)
                for (bool inplace : {false, true}) sweep.allreduce(algo, t, op, n, inplace);
          // Pipelined: several chunks per block in every phase, and a prime count.
          for (std::size_t n : {large_count(), prime})
            for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max})
              sweep.allreduce(algo, DataType::f32, op, n, n % 2 == 0);
          sweep.allreduce(algo, DataType::bf16, ReduceOp::sum, large_count(), false);
          sweep.allreduce(algo, DataType::i64, ReduceOp::prod, prime, true);
        }
        auto store = ctx.store();
        store->set(fmt::format("hash/{}", ctx.rank), std::to_string(sweep.shared_hash()));
        for (int r = 0; r < ctx.size; ++r)
          EXPECT_EQ(store->get(fmt::format("hash/{}", r)), std::to_string(sweep.shared_hash()))
              << "rank " << r << "'s outputs differ from rank " << ctx.rank << "'s";
        EXPECT_GT(sweep.checks(), 120 * static_cast<int>(sweep_types().size()));
        if (ctx.rank == 0)
          std::printf("[ %s ] %d checks, %d skipped (hierarchical does not apply)\n", layout.name,
                      sweep.checks(), sweep.skipped());
        comm->barrier();
      },
      run_options("shm", sweep_env()));
  testing::expect_all_ok(exits);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, Hierarchical,
    ::testing::Values(Layout{"two_hosts_of_two", {0, 0, 1, 1}, "hierarchical"},
                      Layout{"three_hosts_of_two_interleaved", {0, 1, 2, 0, 1, 2}, "hierarchical"},
                      Layout{"two_hosts_of_three_interleaved", {0, 1, 0, 1, 0, 1}, "hierarchical"},
                      Layout{"uneven_hosts", {0, 0, 1}, "ring"},
                      Layout{"one_rank_per_host", {0, 1, 2}, "ring"}),
    [](const ::testing::TestParamInfo<Layout>& p) { return std::string(p.param.name); });

TEST(HierarchicalFault, RankKilledOnTheOtherHostFailsEverySurvivorWithPeerLost) {
  const Layout layout{"two_hosts_of_two", {0, 0, 1, 1}, "hierarchical"};
  const auto exits = testing::run_ranks(
      4,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx, on_host(layout, ctx.rank));
        auto store = ctx.store();
        const std::size_t n = 8u << 20;  // 32 MiB of f32: still moving when the rank dies
        ASSERT_EQ(comm->algorithm_for(CollectiveKind::allreduce, n * sizeof(float)),
                  "hierarchical");
        std::vector<float> v(n, 1.0f);
        auto view = BufferView::of(std::span<float>(v));
        comm->barrier();
        const std::string lost = allreduce_while_rank_dies(*comm, *store, view, 3, "hierarchical");
        EXPECT_NE(lost.find("hierarchical"), std::string::npos) << lost;
        EXPECT_TRUE(comm->poisoned());
      },
      run_options("shm"));
  ASSERT_EQ(exits.size(), 4u);
  for (int r : {0, 1, 2}) EXPECT_TRUE(exits[static_cast<std::size_t>(r)].ok()) << r;
  EXPECT_EQ(exits[3].signal, SIGKILL) << testing::describe(exits[3]);
}

}  // namespace
}  // namespace tandem::mptest
