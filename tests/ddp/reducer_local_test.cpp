// The Reducer on a one-rank communicator (in-process store): argument checks, error
// messages and per-pass bookkeeping, which need no peers.

#include "ddp_util.hpp"

#include <tandem/ddp.hpp>
#include <tandem/error.hpp>
#include <tandem/store.hpp>

#include <gtest/gtest.h>

#include <cstdint>

namespace tandem::ddptest {
namespace {

std::shared_ptr<Communicator> solo() {
  return Communicator::create(std::make_shared<store::HashStore>(), 0, 1);
}

std::vector<ParamSpec> four_params() {
  return {{DataType::f32, 10}, {DataType::f32, 3}, {DataType::f64, 7}, {DataType::f32, 5}};
}

// Runs `f` and returns the Error it threw (a test failure when it did not throw).
template <class F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no Error thrown";
  return Error(ErrorCode::Internal, "none");
}

void expect_message(const Error& e, ErrorCode code, const std::string& fragment) {
  EXPECT_EQ(e.code(), code) << e.what();
  EXPECT_NE(e.message().find(fragment), std::string::npos)
      << "expected '" << fragment << "' in: " << e.what();
}

TEST(ReducerLocal, DoubleMarkNamesTheParameter) {
  FakeModel m(four_params());
  ddp::Reducer r(solo(), m.views());
  r.mark_variable_ready(3);
  expect_message(error_of([&] { r.mark_variable_ready(3); }), ErrorCode::InvalidArgument,
                 "parameter 3 marked ready twice");
  for (std::size_t i : {0u, 1u, 2u}) r.mark_variable_ready(i);
  r.finalize_backward();
  // A new pass may mark it again.
  for (std::size_t i : {3u, 2u, 1u, 0u}) r.mark_variable_ready(i);
  r.finalize_backward();
  EXPECT_EQ(r.stats().sync_passes, 2u);
}

TEST(ReducerLocal, ParametersNeverReadyAreNamedAndThePassIsReset) {
  FakeModel m(four_params());
  ddp::Reducer r(solo(), m.views());
  r.mark_variable_ready(0);
  r.mark_variable_ready(2);
  const Error e = error_of([&] { r.finalize_backward(); });
  expect_message(e, ErrorCode::InvalidArgument, "parameters 1, 3");
  expect_message(e, ErrorCode::InvalidArgument, "find_unused_parameters=true");
  // The failed pass left nothing behind: a full pass works.
  for (std::size_t i = 0; i < 4; ++i) r.mark_variable_ready(i);
  EXPECT_NO_THROW(r.finalize_backward());
}

TEST(ReducerLocal, ArgumentChecks) {
  FakeModel m(four_params());
  ddp::Reducer r(solo(), m.views());
  expect_message(error_of([&] { r.mark_variable_ready(4); }), ErrorCode::InvalidArgument,
                 "no parameter 4");
  const std::vector<std::size_t> unused{1};
  expect_message(error_of([&] { r.prepare_for_backward(unused); }), ErrorCode::InvalidArgument,
                 "find_unused_parameters");
  BufferView wrong = m.view(0);
  wrong.dtype = DataType::f64;
  expect_message(error_of([&] { r.set_gradient(0, wrong); }), ErrorCode::InvalidArgument,
                 "registered as f32 x 10");
  BufferView gpu = m.view(0);
  gpu.device = Device::cuda(0);
  expect_message(error_of([&] { r.set_gradient(0, gpu); }), ErrorCode::InvalidArgument, "cuda:0");
  std::vector<BufferView> on_gpu = m.views();
  on_gpu[1].device = Device::cuda(0);
  expect_message(error_of([&] { ddp::Reducer(solo(), on_gpu); }), ErrorCode::InvalidArgument,
                 "give ReducerOptions::memory for device gradients");

  r.mark_variable_ready(0);
  expect_message(error_of([&] { r.prepare_for_backward(); }), ErrorCode::InvalidArgument,
                 "before backward starts");
  expect_message(error_of([&] { r.register_comm_hook(ddp::fp16_compress_hook()); }),
                 ErrorCode::InvalidArgument, "during a backward pass");
  for (std::size_t i = 1; i < 4; ++i) r.mark_variable_ready(i);
  r.finalize_backward();
  EXPECT_NO_THROW(r.register_comm_hook(ddp::fp16_compress_hook()));
  EXPECT_EQ(r.stats().hook, "fp16_compress");
}

TEST(ReducerLocal, GradientStorageCanArriveWithTheMark) {
  FakeModel m(four_params());
  std::vector<BufferView> unallocated = m.views();
  for (auto& v : unallocated) v.data = nullptr;
  ddp::Reducer r(solo(), unallocated);
  expect_message(error_of([&] { r.mark_variable_ready(0); }), ErrorCode::InvalidArgument,
                 "no gradient storage");
  for (std::size_t i = 0; i < 4; ++i) {
    fill(m.view(i), 0, i, 0);
    r.mark_variable_ready(i, m.view(i));
  }
  r.finalize_backward();
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(wrong_averages(m.view(i), i, 1, 0, 0), 0u);
}

TEST(ReducerLocal, OneRankAveragesToItselfAndRebuildsOnce) {
  FakeModel m(varied_model());
  ddp::ReducerOptions o;
  o.first_bucket_bytes = 4096;
  o.bucket_cap_bytes = 64 * 1024;
  ddp::Reducer r(solo(), m.views(), o);
  const auto before = r.stats();
  EXPECT_FALSE(before.rebuilt);
  EXPECT_GT(before.buckets.size(), 3u);
  for (int t = 0; t < 3; ++t) {
    const auto order = ready_order(1, m.size(), t);
    for (std::size_t i : order) {
      fill(m.view(i), 0, i, t);
      r.mark_variable_ready(i);
    }
    r.finalize_backward();
    for (std::size_t i = 0; i < m.size(); ++i)
      EXPECT_EQ(wrong_averages(m.view(i), i, 1, t, t), 0u) << "param " << i << " step " << t;
    const auto st = r.stats();
    EXPECT_TRUE(st.rebuilt);
    EXPECT_EQ(st.bucket_generation, 1u) << "rebuilt exactly once";
    EXPECT_EQ(st.ready_order, order);
  }
  // The rebuilt buckets follow the first pass's ready order.
  std::vector<std::size_t> flat;
  for (const auto& b : r.stats().buckets)
    flat.insert(flat.end(), b.parameters.begin(), b.parameters.end());
  const auto expect = ddp::compute_bucket_assignment_by_size(
      m.views(), ready_order(1, m.size(), 0), o.first_bucket_bytes, o.bucket_cap_bytes);
  ASSERT_EQ(r.stats().buckets.size(), expect.size());
  for (std::size_t b = 0; b < expect.size(); ++b)
    EXPECT_EQ(r.stats().buckets[b].parameters, expect[b]);
}

TEST(ReducerLocal, NoSyncLeavesGradientsAlone) {
  FakeModel m(four_params());
  ddp::Reducer r(solo(), m.views());
  {
    auto guard = r.no_sync();
    EXPECT_FALSE(r.require_sync());
    for (std::size_t i = 0; i < 4; ++i) {
      fill(m.view(i), 0, i, 0);
      r.mark_variable_ready(i);
    }
    // A no_sync pass may leave parameters out, and still rejects a double mark.
    expect_message(error_of([&] { r.mark_variable_ready(2); }), ErrorCode::InvalidArgument,
                   "marked ready twice");
    r.finalize_backward();
  }
  EXPECT_TRUE(r.require_sync());
  const auto st = r.stats();
  EXPECT_EQ(st.local_passes, 1u);
  EXPECT_EQ(st.sync_passes, 0u);
  EXPECT_TRUE(st.launches.empty());
}

TEST(ReducerLocal, BucketViewsAreAlignedAndHoldTheRegisteredGradients) {
  FakeModel m(varied_model());
  for (std::size_t i = 0; i < m.size(); ++i) fill(m.view(i), 0, i, 7);
  ddp::ReducerOptions o;
  o.gradient_as_bucket_view = true;
  o.first_bucket_bytes = 4096;
  o.bucket_cap_bytes = 64 * 1024;
  ddp::Reducer r(solo(), m.views(), o);
  const auto st = r.stats();
  for (const auto& b : st.buckets) {
    const BufferView first = r.bucket_view(b.parameters.front());
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(first.data) % 64, 0u) << "bucket start aligned";
    for (std::size_t j = 0; j < b.parameters.size(); ++j) {
      const BufferView v = r.bucket_view(b.parameters[j]);
      EXPECT_EQ(static_cast<std::byte*>(v.data),
                static_cast<std::byte*>(first.data) + b.offsets[j] * dtype_size(b.dtype));
      EXPECT_EQ(v.count, m.spec(b.parameters[j]).count);
    }
  }
  for (std::size_t i = 0; i < m.size(); ++i)
    EXPECT_EQ(wrong_averages(r.bucket_view(i), i, 1, 7, 7), 0u) << "content copied in, param " << i;
}

TEST(ReducerLocal, DestroyedMidPassWithoutHanging) {
  FakeModel m(varied_model());
  ddp::ReducerOptions o;
  o.first_bucket_bytes = 1024;
  auto comm = solo();
  {
    ddp::Reducer r(comm, m.views(), o);
    for (std::size_t i = m.size(); i-- > 3;) r.mark_variable_ready(i);
    EXPECT_FALSE(r.stats().buckets.empty());
  }
  EXPECT_FALSE(comm->poisoned());
}

}  // namespace
}  // namespace tandem::ddptest
