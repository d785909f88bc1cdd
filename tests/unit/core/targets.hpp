#pragma once
// Runs a test body once per SIMD instruction set the kernels were compiled for.

#include "core/reduce.hpp"

#include <gtest/gtest.h>
#include <hwy/highway.h>
#include <hwy/targets.h>

#include <cstdint>

namespace tandem::core {

/// Runs `body` once per instruction set that was compiled and that this CPU supports, with
/// the kernels dispatching to it, then restores the best one.
template <class Body>
void for_each_target(Body body) {
  const auto targets = hwy::SupportedAndGeneratedTargets();
  ASSERT_FALSE(targets.empty());
  for (const std::int64_t t : targets) {
    hwy::SetSupportedTargetsForTest(t);
    hwy::GetChosenTarget().Update(hwy::SupportedTargets());
    SCOPED_TRACE(hwy::TargetName(t));
    ASSERT_STREQ(kernel_target(), hwy::TargetName(t));
    body();
  }
  hwy::SetSupportedTargetsForTest(0);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
}

/// Sets the streaming threshold (core/reduce.hpp) for one scope.
struct StreamThreshold {
  explicit StreamThreshold(std::size_t bytes) { set_stream_threshold(bytes); }
  ~StreamThreshold() { set_stream_threshold(0); }
  StreamThreshold(const StreamThreshold&) = delete;
  StreamThreshold& operator=(const StreamThreshold&) = delete;
};

}  // namespace tandem::core
