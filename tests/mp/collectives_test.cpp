// Every collective over the real transports (shm, and tcp with TANDEM_SHM_DISABLE=1), 2 to 5
// ranks, and over tcp at 6 and 9 ranks, where some peers are not connected at setup and every
// algorithm that needs them connects them at its first message: one forked group per
// configuration runs the whole sweep (forking is the expensive part), and the ranks compare a
// hash of their shared outputs at the end.

#include "mp_util.hpp"
#include "sweep.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <tuple>

namespace tandem::mptest {
namespace {

using Config = std::tuple<std::string, int>;

std::string config_name(const ::testing::TestParamInfo<Config>& p) {
  return std::get<0>(p.param) + std::to_string(std::get<1>(p.param));
}

class Collectives : public ::testing::TestWithParam<Config> {};

TEST_P(Collectives, MatchReferenceOnEveryRank) {
  const std::string transport = std::get<0>(GetParam());
  const int world = std::get<1>(GetParam());
  const auto start = std::chrono::steady_clock::now();
  const auto exits = testing::run_ranks(
      world,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        ASSERT_EQ(comm->rank(), ctx.rank);
        ASSERT_EQ(comm->size(), ctx.size);
        for (int p = 0; p < ctx.size; ++p) {
          const std::string want = p == ctx.rank                  ? "self"
                                   : transport.starts_with("ucx") ? "ucx"
                                                                  : transport;
          EXPECT_EQ(comm->transport_to(p), want) << "peer " << p;
        }
        EXPECT_EQ(comm->local_size(), ctx.size);
        EXPECT_EQ(comm->local_rank(), ctx.rank);
        Sweep sweep(*comm);
        sweep.small();
        sweep.large();
        // Every rank must have produced bitwise the same shared outputs.
        auto store = ctx.store();
        store->set(fmt::format("hash/{}", ctx.rank), std::to_string(sweep.shared_hash()));
        for (int r = 0; r < ctx.size; ++r) {
          EXPECT_EQ(store->get(fmt::format("hash/{}", r)), std::to_string(sweep.shared_hash()))
              << "rank " << r << "'s outputs differ from rank " << ctx.rank << "'s";
        }
        EXPECT_GT(sweep.checks(), 1000);
        if (ctx.rank == 0)
          std::printf("[ %s x%d ] %d checks, %d skipped (algorithm does not apply)\n",
                      transport.c_str(), world, sweep.checks(), sweep.skipped());
        comm->barrier();
      },
      run_options(transport, sweep_env()));
  testing::expect_all_ok(exits);
  std::printf("[ %s x%d ] %.1f s\n", transport.c_str(), world,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

INSTANTIATE_TEST_SUITE_P(RealTransports, Collectives,
                         ::testing::Combine(::testing::Values("shm", "tcp"),
                                            ::testing::Values(2, 3, 4, 5)),
                         config_name);

// 6 ranks: each rank's setup peers are 4 of its 5 peers; 9 ranks: 6 of 8 (transport/exchange.hpp).
INSTANTIATE_TEST_SUITE_P(OnDemand, Collectives,
                         ::testing::Combine(::testing::Values("tcp"), ::testing::Values(6, 9)),
                         config_name);

#if TANDEM_HAVE_UCX
// UCX between ranks of one host: its shared-memory transports ("ucx"), and its tcp
// transport on loopback ("ucx_tcp", UCX_TLS=tcp: what it uses between hosts without RDMA).
INSTANTIATE_TEST_SUITE_P(Ucx, Collectives,
                         ::testing::Combine(::testing::Values("ucx", "ucx_tcp"),
                                            ::testing::Values(2, 3, 5)),
                         config_name);
#endif

}  // namespace
}  // namespace tandem::mptest
