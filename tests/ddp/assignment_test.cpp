// Bucket assignment (pure logic): caps, one dtype per bucket, the first-bucket cap, buckets in
// completion order.

#include <tandem/ddp.hpp>
#include <tandem/error.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace tandem::ddp {
namespace {

using Assignment = std::vector<std::vector<std::size_t>>;

std::vector<BufferView> f32_params(std::initializer_list<std::size_t> counts) {
  std::vector<BufferView> v;
  for (auto c : counts) v.push_back({nullptr, c, DataType::f32, Device::cpu()});
  return v;
}

std::vector<std::size_t> reversed(std::size_t n) {
  std::vector<std::size_t> o(n);
  std::iota(o.rbegin(), o.rend(), std::size_t{0});
  return o;
}

TEST(BucketAssignment, ReverseOrderWithFirstBucketCap) {
  // 6 params of 100 floats (400 bytes). First bucket closes at >= 800 bytes, later at >= 1200.
  const auto p = f32_params({100, 100, 100, 100, 100, 100});
  const Assignment a = compute_bucket_assignment_by_size(p, reversed(6), 800, 1200);
  EXPECT_EQ(a, (Assignment{{5, 4}, {3, 2, 1}, {0}}));
}

TEST(BucketAssignment, LargeParameterGetsItsOwnBucket) {
  const auto p = f32_params({10, 1'000'000, 10, 10});
  const Assignment a = compute_bucket_assignment_by_size(p, reversed(4), 1 << 20, 25 << 20);
  // 3 and 2 are small: the first bucket fills with 1 (4 MB >= 1 MiB) and closes; 0 remains.
  EXPECT_EQ(a, (Assignment{{3, 2, 1}, {0}}));
  const Assignment tiny = compute_bucket_assignment_by_size(p, reversed(4), 1, 1);
  EXPECT_EQ(tiny, (Assignment{{3}, {2}, {1}, {0}}));
}

TEST(BucketAssignment, DefaultCapsKeepASmallModelInOneBucket) {
  const auto p = f32_params({288, 32, 18432, 64, 204800, 128, 1280, 10});
  const Assignment a = compute_bucket_assignment_by_size(p, reversed(8), 1 << 20, 25 << 20);
  EXPECT_EQ(a, (Assignment{{7, 6, 5, 4, 3, 2, 1, 0}}));
}

TEST(BucketAssignment, OneDtypePerBucketInCompletionOrder) {
  std::vector<BufferView> p = {
      {nullptr, 10, DataType::f32, Device::cpu()}, {nullptr, 10, DataType::f64, Device::cpu()},
      {nullptr, 10, DataType::f32, Device::cpu()}, {nullptr, 10, DataType::f16, Device::cpu()},
      {nullptr, 10, DataType::f64, Device::cpu()}, {nullptr, 10, DataType::f32, Device::cpu()},
  };
  const Assignment a = compute_bucket_assignment_by_size(p, reversed(6), 1 << 20, 25 << 20);
  // Nothing reaches a cap: one bucket per dtype, ordered by when its last member is ready
  // (f16: param 3 at position 2; f64: param 1 at position 4; f32: param 0 at position 5).
  EXPECT_EQ(a, (Assignment{{3}, {4, 1}, {5, 2, 0}}));
  for (const auto& bucket : a) {
    for (auto i : bucket) EXPECT_EQ(p[i].dtype, p[bucket.front()].dtype);
  }
}

TEST(BucketAssignment, FirstCapAppliesPerDtype) {
  std::vector<BufferView> p;
  for (int i = 0; i < 4; ++i) {
    p.push_back({nullptr, 256, DataType::f32, Device::cpu()});  // 1 KiB
    p.push_back({nullptr, 128, DataType::f64, Device::cpu()});  // 1 KiB
  }
  const Assignment a = compute_bucket_assignment_by_size(p, reversed(8), 1024, 4096);
  // Each dtype closes its first bucket after one parameter, then collects the rest.
  EXPECT_EQ(a, (Assignment{{7}, {6}, {5, 3, 1}, {4, 2, 0}}));
}

TEST(BucketAssignment, FollowsTheGivenOrder) {
  const auto p = f32_params({100, 100, 100, 100});
  const std::vector<std::size_t> order{2, 0, 3, 1};
  const Assignment a = compute_bucket_assignment_by_size(p, order, 400, 800);
  EXPECT_EQ(a, (Assignment{{2}, {0, 3}, {1}}));
}

TEST(BucketAssignment, ZeroSizedAndEmpty) {
  const auto p = f32_params({0, 0, 5});
  EXPECT_EQ(compute_bucket_assignment_by_size(p, reversed(3), 1 << 20, 25 << 20),
            (Assignment{{2, 1, 0}}));
  EXPECT_TRUE(compute_bucket_assignment_by_size({}, {}, 1, 1).empty());
}

TEST(BucketAssignment, RejectsAnOrderThatIsNotAPermutation) {
  const auto p = f32_params({1, 2, 3});
  const std::vector<std::size_t> repeated{0, 1, 1}, short_order{0, 1}, out_of_range{0, 1, 3};
  for (const auto* o : {&repeated, &short_order, &out_of_range}) {
    try {
      compute_bucket_assignment_by_size(p, *o, 1, 1);
      FAIL() << "accepted a bad order";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    }
  }
}

}  // namespace
}  // namespace tandem::ddp
