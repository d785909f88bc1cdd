// The Reducer across forked ranks: exact averages (bitwise identical on every rank) for
// rank-dependent values and ready orders, the one rebuild in rank 0's order, overlap and
// launch order, no_sync accumulation, unused parameters.

#include "ddp_util.hpp"

#include <tandem/ddp.hpp>
#include <tandem/error.hpp>

#include <gtest/gtest.h>

#include <numeric>
#include <string>

namespace tandem::ddptest {
namespace {

using ddp::Reducer;
using ddp::ReducerOptions;

std::vector<std::size_t> reversed(std::size_t n) {
  std::vector<std::size_t> o(n);
  std::iota(o.rbegin(), o.rend(), std::size_t{0});
  return o;
}

std::vector<std::vector<std::size_t>> bucket_params(const ddp::ReducerStats& st) {
  std::vector<std::vector<std::size_t>> out;
  for (const auto& b : st.buckets) out.push_back(b.parameters);
  return out;
}

std::uint64_t hash_buckets(const ddp::ReducerStats& st) {
  std::uint64_t h = 1469598103934665603ull;
  for (const auto& b : st.buckets) {
    for (auto i : b.parameters) h = (h ^ i) * 1099511628211ull;
    h = (h ^ 0xffff) * 1099511628211ull;
  }
  return h;
}

// The gradients as the framework sees them: its own storage, or the bucket slots.
std::vector<BufferView> grads_of(const FakeModel& m, const Reducer& r, bool view) {
  if (!view) return m.views();
  std::vector<BufferView> v;
  for (std::size_t i = 0; i < m.size(); ++i) v.push_back(r.bucket_view(i));
  return v;
}

ReducerOptions small_buckets(bool view) {
  ReducerOptions o;
  o.first_bucket_bytes = 8 * 1024;
  o.bucket_cap_bytes = 256 * 1024;
  o.gradient_as_bucket_view = view;
  return o;
}

class ReducerMp : public ::testing::TestWithParam<std::tuple<int, bool>> {
 protected:
  int world() const { return std::get<0>(GetParam()); }
  bool view() const { return std::get<1>(GetParam()); }
};

TEST_P(ReducerMp, ExactAveragesAndOneRebuildInRankZeroOrder) {
  const bool as_view = view();
  testing::expect_all_ok(testing::run_ranks(
      world(),
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        FakeModel m(varied_model());
        const std::size_t n = m.size();
        const ReducerOptions o = small_buckets(as_view);
        Reducer r(comm, m.views(), o);
        EXPECT_EQ(bucket_params(r.stats()),
                  ddp::compute_bucket_assignment_by_size(m.views(), reversed(n),
                                                         o.first_bucket_bytes, o.bucket_cap_bytes))
            << "initial buckets in reverse registration order";
        EXPECT_GT(r.stats().buckets.size(), 4u);
        const auto rebuilt = ddp::compute_bucket_assignment_by_size(
            m.views(), ready_order(0, n, 0), o.first_bucket_bytes, o.bucket_cap_bytes);

        for (int t = 0; t < 4; ++t) {
          auto g = grads_of(m, r, as_view);
          for (std::size_t i : ready_order(ctx.rank, n, t)) {
            fill(g[i], ctx.rank, i, t);
            r.mark_variable_ready(i);
          }
          r.finalize_backward();
          g = grads_of(m, r, as_view);  // the rebuild after step 0 moves bucket views
          for (std::size_t i = 0; i < n; ++i)
            EXPECT_EQ(wrong_averages(g[i], i, ctx.size, t, t), 0u)
                << "rank " << ctx.rank << " param " << i << " step " << t;
          EXPECT_TRUE(same_on_every_rank(*comm, hash_gradients(g))) << "step " << t;

          const auto st = r.stats();
          EXPECT_TRUE(st.rebuilt);
          EXPECT_EQ(st.bucket_generation, 1u) << "rebuilt exactly once";
          EXPECT_EQ(bucket_params(st), rebuilt) << "buckets in rank 0's ready order, step " << t;
          EXPECT_TRUE(same_on_every_rank(*comm, hash_buckets(st)));
          EXPECT_EQ(st.ready_order, ready_order(ctx.rank, n, t));
          ASSERT_EQ(st.launches.size(), st.buckets.size());
          for (std::size_t b = 0; b < st.launches.size(); ++b)
            EXPECT_EQ(st.launches[b].bucket, b) << "buckets start in bucket order";
        }
      },
      run_options()));
}

TEST_P(ReducerMp, NoSyncAccumulatesThenTheSyncedPassAveragesTheSums) {
  const bool as_view = view();
  testing::expect_all_ok(testing::run_ranks(
      world(),
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        FakeModel m(varied_model());
        const std::size_t n = m.size();
        Reducer r(comm, m.views(), small_buckets(as_view));
        auto g = grads_of(m, r, as_view);
        {
          auto guard = r.no_sync();
          for (int t = 0; t < 3; ++t) {
            for (std::size_t i : ready_order(ctx.rank, n, t)) {
              fill(g[i], ctx.rank, i, t, /*add=*/true);
              r.mark_variable_ready(i);
            }
            r.finalize_backward();
          }
        }
        // Still this rank's own sums: nothing was communicated.
        std::size_t not_local = 0;
        for (std::size_t k = 0; k < g[0].count; ++k) {
          double own = 0;
          for (int t = 0; t < 3; ++t) own += contribution(ctx.rank, 0, k, t);
          not_local += get(g[0], k) != own;
        }
        EXPECT_EQ(not_local, 0u);
        for (std::size_t i : ready_order(ctx.rank, n, 3)) {
          fill(g[i], ctx.rank, i, 3, /*add=*/true);
          r.mark_variable_ready(i);
        }
        r.finalize_backward();
        g = grads_of(m, r, as_view);
        for (std::size_t i = 0; i < n; ++i)
          EXPECT_EQ(wrong_averages(g[i], i, ctx.size, 0, 3), 0u) << "param " << i;
        EXPECT_TRUE(same_on_every_rank(*comm, hash_gradients(g)));
        const auto st = r.stats();
        EXPECT_EQ(st.local_passes, 3u);
        EXPECT_EQ(st.sync_passes, 1u);
      },
      run_options()));
}

TEST_P(ReducerMp, UnusedParametersDoNotBlockBuckets) {
  const bool as_view = view();
  testing::expect_all_ok(testing::run_ranks(
      world(),
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        FakeModel m(varied_model());
        const std::size_t n = m.size();
        ReducerOptions o = small_buckets(as_view);
        o.find_unused_parameters = true;
        Reducer r(comm, m.views(), o);
        // Parameter 4 is unused everywhere (declared up front), parameter 0 only on rank 1
        // (found at finalize). Their storage holds garbage that must not be reduced.
        const std::vector<std::size_t> unused_everywhere{4};
        for (int t = 0; t < 2; ++t) {
          auto g = grads_of(m, r, as_view);
          for (std::size_t k = 0; k < g[4].count; ++k) set(g[4], k, 999);  // stale content
          r.prepare_for_backward(unused_everywhere);
          for (std::size_t i : ready_order(ctx.rank, n, t)) {
            if (i == 4) continue;
            if (i == 0 && ctx.rank == 1) {
              for (std::size_t k = 0; k < g[i].count; ++k) set(g[i], k, 999);
              continue;
            }
            fill(g[i], ctx.rank, i, t);
            r.mark_variable_ready(i);
          }
          r.finalize_backward();
          g = grads_of(m, r, as_view);
          for (std::size_t i = 1; i < n; ++i) {
            if (i == 4) continue;
            EXPECT_EQ(wrong_averages(g[i], i, ctx.size, t, t), 0u) << "param " << i;
          }
          std::size_t wrong4 = 0, wrong0 = 0;
          for (std::size_t k = 0; k < g[4].count; ++k) wrong4 += get(g[4], k) != 0.0;
          for (std::size_t k = 0; k < g[0].count; ++k) {
            double sum = 0;
            for (int rr = 0; rr < ctx.size; ++rr)
              if (rr != 1) sum += contribution(rr, 0, k, t);
            wrong0 += get(g[0], k) != average_of(sum, ctx.size, DataType::f32);
          }
          EXPECT_EQ(wrong4, 0u) << "unused everywhere: zero";
          EXPECT_EQ(wrong0, 0u) << "unused on rank 1: the others' sum over all ranks";
          EXPECT_TRUE(same_on_every_rank(*comm, hash_gradients(g)));
        }
        // A parameter declared unused cannot get a gradient in that pass.
        r.prepare_for_backward(unused_everywhere);
        try {
          r.mark_variable_ready(4);
          ADD_FAILURE() << "marking an unused parameter did not throw";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
        }
        auto g = grads_of(m, r, as_view);
        for (std::size_t i = 0; i < n; ++i) {
          if (i == 4) continue;
          fill(g[i], ctx.rank, i, 5);
          r.mark_variable_ready(i);
        }
        r.finalize_backward();
        g = grads_of(m, r, as_view);
        EXPECT_EQ(wrong_averages(g[0], 0, ctx.size, 5, 5), 0u);
      },
      run_options()));
}

INSTANTIATE_TEST_SUITE_P(WorldAndView, ReducerMp,
                         ::testing::Combine(::testing::Values(2, 3), ::testing::Bool()),
                         [](const auto& p) {
                           return std::to_string(std::get<0>(p.param)) + "ranks_" +
                                  (std::get<1>(p.param) ? "bucket_view" : "copy");
                         });

TEST(ReducerMpOverlap, FirstBucketStartsBeforeTheLastMarkAndLaunchesKeepBucketOrder) {
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        FakeModel m(cnn_model());
        const std::size_t n = m.size();
        ReducerOptions o;
        o.first_bucket_bytes = 4096;
        o.bucket_cap_bytes = 100 * 1024;
        Reducer r(comm, m.views(), o);
        const std::vector<std::vector<std::size_t>> expect{{7, 6}, {5, 4}, {3, 2, 1, 0}};
        EXPECT_EQ(bucket_params(r.stats()), expect);
        // Backward order (last layer first): each bucket starts as soon as it is complete.
        for (std::size_t i : reversed(n)) {
          fill(m.view(i), ctx.rank, i, 0);
          r.mark_variable_ready(i);
        }
        r.finalize_backward();
        auto st = r.stats();
        EXPECT_EQ(bucket_params(st), expect) << "same order on every rank: same buckets";
        ASSERT_EQ(st.launches.size(), 3u);
        EXPECT_EQ(st.launches[0].bucket, 0u);
        EXPECT_EQ(st.launches[0].marks_before, 2u) << "first allreduce overlapped backward";
        EXPECT_LT(st.launches[0].marks_before, n);
        EXPECT_EQ(st.launches[1].marks_before, 4u);
        EXPECT_EQ(st.launches[2].marks_before, 8u);
        for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(wrong_averages(m.view(i), i, 2, 0, 0), 0u);

        // Forward order: the last bucket is complete first but must wait for bucket 0.
        for (std::size_t i = 0; i < n; ++i) {
          fill(m.view(i), ctx.rank, i, 1);
          r.mark_variable_ready(i);
        }
        r.finalize_backward();
        st = r.stats();
        ASSERT_EQ(st.launches.size(), 3u);
        for (std::size_t b = 0; b < 3; ++b) {
          EXPECT_EQ(st.launches[b].bucket, b);
          EXPECT_EQ(st.launches[b].marks_before, n);
        }
        for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(wrong_averages(m.view(i), i, 2, 1, 1), 0u);
      },
      run_options()));
}

TEST(ReducerMpDefaults, SmallCnnIsOneBucketWithDefaultCaps) {
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        FakeModel m(cnn_model());
        Reducer r(comm, m.views());
        for (int t = 0; t < 2; ++t) {
          for (std::size_t i : ready_order(ctx.rank, m.size(), t)) {
            fill(m.view(i), ctx.rank, i, t);
            r.mark_variable_ready(i);
          }
          r.finalize_backward();
          for (std::size_t i = 0; i < m.size(); ++i)
            EXPECT_EQ(wrong_averages(m.view(i), i, 2, t, t), 0u);
        }
        const auto st = r.stats();
        ASSERT_EQ(st.buckets.size(), 1u);
        EXPECT_EQ(st.buckets[0].parameters, ready_order(0, m.size(), 0));
        EXPECT_EQ(st.hook, "allreduce");
      },
      run_options()));
}

TEST(ReducerMpErrors, NeverReadyParameterFailsClearlyOnEveryRankAndTheNextPassWorks) {
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        FakeModel m(varied_model());
        Reducer r(comm, m.views(), small_buckets(false));
        for (std::size_t i : reversed(m.size())) {
          if (i == 1) continue;
          fill(m.view(i), ctx.rank, i, 0);
          r.mark_variable_ready(i);
        }
        try {
          r.finalize_backward();
          ADD_FAILURE() << "finalize_backward accepted a parameter that never became ready";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
          EXPECT_NE(e.message().find("parameters 1;"), std::string::npos) << e.what();
          EXPECT_NE(e.message().find("find_unused_parameters=true"), std::string::npos) << e.what();
        }
        // Every rank started the same buckets, so the ranks are still in step.
        for (std::size_t i : reversed(m.size())) {
          fill(m.view(i), ctx.rank, i, 1);
          r.mark_variable_ready(i);
        }
        r.finalize_backward();
        for (std::size_t i = 0; i < m.size(); ++i)
          EXPECT_EQ(wrong_averages(m.view(i), i, 2, 1, 1), 0u) << "param " << i;
      },
      run_options()));
}

TEST(ReducerMpErrors, DifferentParametersAcrossRanksAreAMismatch) {
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        auto specs = cnn_model();
        if (ctx.rank == 1) specs[3].count += 1;
        FakeModel m(specs);
        try {
          Reducer r(comm, m.views());
          ADD_FAILURE() << "constructed over different parameters";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::Mismatch);
          EXPECT_NE(e.message().find("rank 1"), std::string::npos) << e.what();
        }
      },
      run_options()));
}

// A hook that leaves a different "average" on rank 1: the replicas would drift apart.
class SkewedHook final : public ddp::CommHook {
 public:
  explicit SkewedHook(int rank) : rank_(rank), inner_(ddp::allreduce_hook()) {}
  std::string_view name() const noexcept override { return "skewed"; }
  std::shared_ptr<Work> start(const ddp::GradBucket& b) override { return inner_->start(b); }
  void finish(const ddp::GradBucket& b) override {
    inner_->finish(b);
    if (rank_ == 1 && b.buffer.count > 0) set(b.buffer, 0, get(b.buffer, 0) + 1.0);
  }

 private:
  int rank_;
  std::unique_ptr<ddp::CommHook> inner_;
};

// TANDEM_DEBUG=DETAIL: the ranks compare layout and averaged gradients after every pass.
TEST(ReducerMpDetail, DivergingGradientsAreAMismatchOnEveryRank) {
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        FakeModel m(cnn_model());
        Reducer r(comm, m.views());
        auto pass = [&](int t) {
          r.prepare_for_backward({});
          for (std::size_t i : reversed(m.size())) {
            fill(m.views()[i], ctx.rank, i, t);
            r.mark_variable_ready(i);
          }
          r.finalize_backward();
        };
        pass(0);  // the checked pass agrees
        r.register_comm_hook(std::make_unique<SkewedHook>(ctx.rank));
        try {
          pass(1);
          ADD_FAILURE() << "rank " << ctx.rank << ": diverging gradients were not noticed";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::Mismatch) << e.what();
          EXPECT_NE(e.message().find("rank 1: the averaged gradients"), std::string::npos)
              << e.what();
        }
      },
      run_options({"TANDEM_DEBUG=DETAIL", "TANDEM_DEBUG_SUBSYS=DDP"})));
}

}  // namespace
}  // namespace tandem::ddptest
