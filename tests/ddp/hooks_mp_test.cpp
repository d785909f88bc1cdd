// Communication hooks across forked ranks: fp16 and bf16 compression stay within their
// rounding, never overflow where the average fits, pass other dtypes through exactly, and
// give bitwise identical results on every rank; a user hook is called per bucket.

#include "ddp_util.hpp"

#include <tandem/ddp.hpp>
#include <tandem/error.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <string>

namespace tandem::ddptest {
namespace {

using ddp::Reducer;
using ddp::ReducerOptions;

// Non-integer values of both signs, different on every rank.
double real_value(int rank, std::size_t p, std::size_t k) {
  return (rank + 1) * 0.3719 - 2.5 + static_cast<double>(k % 1000) * 1e-3 +
         static_cast<double>(p) * 0.01;
}

std::vector<ParamSpec> hook_model() {
  return {{DataType::f32, 5000},
          {DataType::f64, 300},
          {DataType::i32, 10},
          {DataType::f16, 64},
          {DataType::f32, 16}};
}

class Compression : public ::testing::TestWithParam<std::string> {};

TEST_P(Compression, WithinRoundingAndIdenticalOnEveryRank) {
  const bool fp16 = GetParam() == "fp16";
  testing::expect_all_ok(testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        FakeModel m(hook_model());
        ReducerOptions o;
        o.first_bucket_bytes = 1024;  // several buckets: f32, f64, i32 and f16 apart
        Reducer r(comm, m.views(), o);
        r.register_comm_hook(fp16 ? ddp::fp16_compress_hook() : ddp::bf16_compress_hook());
        const int w = ctx.size;
        // Unit roundoff of the wire format.
        const double u = fp16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);

        for (int t = 0; t < 2; ++t) {
          // Params 0 and 1 (f32, f64): real values; 2 and 3 (i32, f16): small integers;
          // 4 (f32): large values whose sum over ranks exceeds the f16 range.
          for (std::size_t k = 0; k < 5000; ++k) set(m.view(0), k, real_value(ctx.rank, 0, k));
          for (std::size_t k = 0; k < 300; ++k) set(m.view(1), k, real_value(ctx.rank, 1, k));
          fill(m.view(2), ctx.rank, 2, t);
          fill(m.view(3), ctx.rank, 3, t);
          for (std::size_t k = 0; k < 16; ++k) set(m.view(4), k, 60000.0 + ctx.rank);
          for (std::size_t i : ready_order(ctx.rank, m.size(), t)) r.mark_variable_ready(i);
          r.finalize_backward();

          std::size_t out_of_bound = 0, not_exact_f32 = 0;
          for (std::size_t p : {0u, 1u}) {
            for (std::size_t k = 0; k < m.spec(p).count; ++k) {
              double exact = 0, scale = 0;
              for (int rr = 0; rr < w; ++rr) {
                exact += real_value(rr, p, k) / w;
                scale += std::fabs(real_value(rr, p, k)) / w;
              }
              const double got = get(m.view(p), k);
              // Each rank's value rounded once, each partial sum once, plus f32 slack.
              const double bound = 2.0 * w * u * scale + 1e-6 * scale;
              out_of_bound += !(std::fabs(got - exact) <= bound);
              not_exact_f32 += got != static_cast<double>(static_cast<float>(exact));
            }
          }
          EXPECT_EQ(out_of_bound, 0u) << GetParam() << " step " << t;
          EXPECT_GT(not_exact_f32, 0u) << "values went over the wire in 16 bits";
          EXPECT_EQ(wrong_averages(m.view(2), 2, w, t, t), 0u) << "i32 passes through exactly";
          EXPECT_EQ(wrong_averages(m.view(3), 3, w, t, t), 0u) << "f16 passes through exactly";
          for (std::size_t k = 0; k < 16; ++k) {
            const double got = get(m.view(4), k);
            EXPECT_TRUE(std::isfinite(got)) << "the sum must not overflow: divide first";
            EXPECT_NEAR(got, 60001.0, fp16 ? 64.0 : 512.0);
          }
          EXPECT_TRUE(same_on_every_rank(*comm, hash_gradients(m.views())));
        }
        EXPECT_EQ(r.stats().hook, fp16 ? "fp16_compress" : "bf16_compress");
      },
      run_options()));
}

INSTANTIATE_TEST_SUITE_P(Hooks, Compression, ::testing::Values("fp16", "bf16"));

// A user hook: sums instead of averaging, and counts its calls.
class SumHook final : public ddp::CommHook {
 public:
  explicit SumHook(std::atomic<int>* starts, std::atomic<int>* finishes)
      : starts_(starts), finishes_(finishes) {}
  std::string_view name() const noexcept override { return "sum"; }
  std::shared_ptr<Work> start(const ddp::GradBucket& b) override {
    ++*starts_;
    EXPECT_EQ(b.parameters.size(), b.offsets.size());
    return b.comm->allreduce_async(b.buffer, b.buffer, ReduceOp::sum);
  }
  void finish(const ddp::GradBucket&) override { ++*finishes_; }

 private:
  std::atomic<int>* starts_;
  std::atomic<int>* finishes_;
};

TEST(CustomHook, CalledOncePerBucketPerSynchronisedPass) {
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        FakeModel m(cnn_model());
        ReducerOptions o;
        o.first_bucket_bytes = 4096;
        o.bucket_cap_bytes = 100 * 1024;
        Reducer r(comm, m.views(), o);
        std::atomic<int> starts{0}, finishes{0};
        r.register_comm_hook(std::make_unique<SumHook>(&starts, &finishes));
        for (std::size_t i = m.size(); i-- > 0;) {
          fill(m.view(i), ctx.rank, i, 0);
          r.mark_variable_ready(i);
        }
        r.finalize_backward();
        EXPECT_EQ(starts.load(), 3);
        EXPECT_EQ(finishes.load(), 3);
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < m.size(); ++i)
          for (std::size_t k = 0; k < m.spec(i).count; ++k)
            wrong += get(m.view(i), k) != contribution(0, i, k, 0) + contribution(1, i, k, 0);
        EXPECT_EQ(wrong, 0u);
        EXPECT_EQ(r.stats().hook, "sum");
      },
      run_options()));
}

}  // namespace
}  // namespace tandem::ddptest
