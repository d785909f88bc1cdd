// The Reducer under concurrency and failure: marks from several threads (as autograd engines
// do), and a peer that dies in the middle of a pass.

#include "ddp_util.hpp"

#include <tandem/ddp.hpp>
#include <tandem/error.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace tandem::ddptest {
namespace {

using ddp::Reducer;
using ddp::ReducerOptions;

TEST(ReducerThreads, MarksFromSeveralThreadsAverageExactly) {
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        FakeModel m(varied_model());
        ReducerOptions o;
        o.first_bucket_bytes = 2048;
        o.bucket_cap_bytes = 64 * 1024;
        Reducer r(comm, m.views(), o);
        for (int t = 0; t < 3; ++t) {
          const auto order = ready_order(ctx.rank, m.size(), t);
          std::vector<std::thread> threads;
          for (std::size_t th = 0; th < 3; ++th) {
            threads.emplace_back([&, th] {
              for (std::size_t j = th; j < order.size(); j += 3) {
                fill(m.view(order[j]), ctx.rank, order[j], t);
                r.mark_variable_ready(order[j]);
              }
            });
          }
          for (auto& thread : threads) thread.join();
          r.finalize_backward();
          for (std::size_t i = 0; i < m.size(); ++i)
            EXPECT_EQ(wrong_averages(m.view(i), i, 2, t, t), 0u) << "param " << i << " step " << t;
          EXPECT_TRUE(same_on_every_rank(*comm, hash_gradients(m.views())));
          const auto st = r.stats();
          for (std::size_t b = 0; b < st.launches.size(); ++b) EXPECT_EQ(st.launches[b].bucket, b);
        }
      },
      run_options()));
}

TEST(ReducerFault, PeerDyingMidPassFailsFinalizeNamingTheBucket) {
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        FakeModel m(cnn_model());
        ReducerOptions o;
        o.first_bucket_bytes = 4096;
        o.bucket_cap_bytes = 100 * 1024;
        Reducer r(comm, m.views(), o);
        if (ctx.rank == 1) {
          // Starts the first bucket, then dies without a goodbye.
          r.mark_variable_ready(7);
          r.mark_variable_ready(6);
          std::_Exit(0);
        }
        const auto start = std::chrono::steady_clock::now();
        bool failed = false;
        try {
          for (std::size_t i = m.size(); i-- > 0;) {
            fill(m.view(i), ctx.rank, i, 0);
            r.mark_variable_ready(i);
          }
          r.finalize_backward();
        } catch (const Error& e) {
          failed = true;
          EXPECT_TRUE(e.code() == ErrorCode::PeerLost || e.code() == ErrorCode::Aborted)
              << e.what();
          EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
        }
        EXPECT_TRUE(failed) << "finalize_backward succeeded although rank 1 died";
        // Never-hang bound, far above detection time and far below TANDEM_TIMEOUT.
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
        // A later pass fails at once (the communicator is poisoned) instead of hanging.
        bool failed_again = false;
        try {
          for (std::size_t i = m.size(); i-- > 0;) r.mark_variable_ready(i);
          r.finalize_backward();
        } catch (const Error&) {
          failed_again = true;
        }
        EXPECT_TRUE(failed_again);
      },
      run_options()));
}

}  // namespace
}  // namespace tandem::ddptest
