// Algorithm choice: TANDEM_ALGO (lenient: falls back where it does not apply) and
// CallOptions::algorithm (strict), as seen through algorithm_for() and the results.

#include "algorithms/algorithm.hpp"
#include "mp_util.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tandem::mptest {
namespace {

TEST(Policy, TandemAlgoForcesWhereItAppliesAndFallsBackElsewhere) {
  const auto exits = testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        EXPECT_EQ(comm->algorithm_for(CollectiveKind::allreduce, 64u << 20), "recursive_doubling");
        EXPECT_EQ(comm->algorithm_for(CollectiveKind::allreduce, 8), "recursive_doubling");
        // broadcast has no recursive_doubling: the selector's choice.
        EXPECT_NE(comm->algorithm_for(CollectiveKind::broadcast, 8), "recursive_doubling");
        std::vector<float> v(1u << 16, static_cast<float>(ctx.rank));
        comm->allreduce(BufferView::of(std::span<float>(v)), ReduceOp::sum);
        EXPECT_EQ(v.back(), 3.0f);

        // allgather has a recursive_doubling; where it does not support the call (3 ranks
        // is not a power of two), TANDEM_ALGO falls back and CallOptions::algorithm refuses.
        std::vector<std::int32_t> in{ctx.rank}, out(3, -1);
        const auto in_v = BufferView::of(std::span<std::int32_t>(in));
        const auto out_v = BufferView::of(std::span<std::int32_t>(out));
        const auto* rd =
            algorithms::Registry::builtin().find(CollectiveKind::allgather, "recursive_doubling");
        ASSERT_NE(rd, nullptr);
        algorithms::Call shape;
        shape.kind = CollectiveKind::allgather;
        shape.in = in_v;
        shape.out = out_v;
        const bool supported = rd->supports(shape, ctx.size);
        comm->allgather(in_v, out_v);
        EXPECT_EQ(out, (std::vector<std::int32_t>{0, 1, 2}));
        if (!supported) {
          try {
            comm->allgather(in_v, out_v, {{}, "recursive_doubling"});
            ADD_FAILURE() << "a forced algorithm that does not support the call ran";
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
            EXPECT_NE(e.message().find("does not support"), std::string::npos) << e.what();
          }
        }
        // A per-call choice beats TANDEM_ALGO.
        std::fill(v.begin(), v.end(), 1.0f);
        comm->allreduce(BufferView::of(std::span<float>(v)), ReduceOp::sum, {{}, "ring"});
        EXPECT_EQ(v.front(), 3.0f);
      },
      run_options("shm", {"TANDEM_ALGO=recursive_doubling"}));
  testing::expect_all_ok(exits);
}

TEST(Policy, PerCollectiveSettingAndCommOptions) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        EXPECT_EQ(comm->algorithm_for(CollectiveKind::allreduce, 8), "ring");
        EXPECT_EQ(comm->algorithm_for(CollectiveKind::broadcast, 64u << 20), "tree");
        // CommOptions::algorithm replaces TANDEM_ALGO for that communicator.
        CommOptions o;
        o.algorithm = "allreduce=tree";
        o.store_prefix = "other";
        auto other = Communicator::create(ctx.store(), ctx.rank, ctx.size, o);
        EXPECT_EQ(other->algorithm_for(CollectiveKind::allreduce, 8), "tree");
        std::vector<double> v(1000, 0.5);
        other->allreduce(BufferView::of(std::span<double>(v)), ReduceOp::sum);
        EXPECT_EQ(v[999], 1.0);
      },
      run_options("tcp", {"TANDEM_ALGO=allreduce=ring;broadcast=tree"}));
  testing::expect_all_ok(exits);
}

// A repeated call skips its checks and the selector (the API remembers the last call it
// checked): what it remembers belongs to one communicator and one exact call.
TEST(Policy, ARepeatedCallIsRecheckedWhenAnythingDiffers) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        std::vector<float> v(8, 1.0f);
        const BufferView view = BufferView::of(std::span<float>(v));
        for (const char* algo : {"ring", "recursive_doubling", "ring"}) {
          // A new communicator (often at the address of the last one) with another choice.
          CommOptions o;
          o.algorithm = fmt::format("allreduce={}", algo);
          o.store_prefix = algo + std::to_string(v[0]);
          auto comm = Communicator::create(ctx.store(), ctx.rank, ctx.size, o);
          comm->allreduce(view, ReduceOp::sum);
          comm->allreduce(view, ReduceOp::sum);
          EXPECT_EQ(comm->last_algorithm(), algo);
          // The same buffer with a count the output does not have, and a root that does not
          // exist: both checked although the pointers repeat.
          const BufferView shorter = BufferView::of(std::span<float>(v.data(), 4));
          EXPECT_THROW(comm->allreduce(view, shorter, ReduceOp::sum), Error);
          EXPECT_THROW(comm->broadcast(view, 5), Error);
          comm->broadcast(view, 0);
          EXPECT_THROW(comm->broadcast(view, 2), Error);
        }
        EXPECT_EQ(v[7], 64.0f);  // six sums of two ranks
      },
      run_options("shm"));
  testing::expect_all_ok(exits);
}

TEST(Policy, UnknownNameInTandemAlgoFailsCreate) {
  const auto exits = testing::run_ranks(
      1,
      [&](const testing::RankContext& ctx) {
        try {
          Communicator::create(ctx.store(), 0, 1);
          ADD_FAILURE() << "create accepted TANDEM_ALGO=warp_drive";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
          EXPECT_NE(e.message().find("TANDEM_ALGO='warp_drive'"), std::string::npos) << e.what();
          EXPECT_NE(e.message().find("ring"), std::string::npos)
              << "lists the known names: " << e.what();
        }
      },
      run_options("shm", {"TANDEM_ALGO=warp_drive"}));
  testing::expect_all_ok(exits);
}

}  // namespace
}  // namespace tandem::mptest
