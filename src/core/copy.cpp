// The streaming copy kernel, compiled per instruction set by Highway like reduce.cpp.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/copy.cpp"
#include "core/copy.hpp"

#include "core/reduce.hpp"

#include <hwy/cache_control.h>
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

HWY_BEFORE_NAMESPACE();
namespace tandem::core {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Unaligned loads, aligned streaming stores, four vectors a step; the head up to the first
// aligned destination byte and the tail shorter than a step go through memcpy.
void stream_copy(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes) {
  const hn::ScalableTag<std::uint8_t> d;
  const std::size_t n = hn::Lanes(d);
  const std::size_t mis = reinterpret_cast<std::uintptr_t>(dst) % n;
  std::size_t i = mis == 0 ? 0 : std::min(bytes, n - mis);
  std::memcpy(dst, src, i);
  for (; i + 4 * n <= bytes; i += 4 * n) {
    const auto a = hn::LoadU(d, src + i);
    const auto b = hn::LoadU(d, src + i + n);
    const auto c = hn::LoadU(d, src + i + 2 * n);
    const auto e = hn::LoadU(d, src + i + 3 * n);
    hn::Stream(a, d, dst + i);
    hn::Stream(b, d, dst + i + n);
    hn::Stream(c, d, dst + i + 2 * n);
    hn::Stream(e, d, dst + i + 3 * n);
  }
  std::memcpy(dst + i, src + i, bytes - i);
  hwy::FlushStream();
}

}  // namespace HWY_NAMESPACE
}  // namespace tandem::core
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tandem::core {

HWY_EXPORT(stream_copy);

void copy(void* dst, const void* src, std::size_t bytes, bool stream) noexcept {
  if (bytes == 0) return;
  if (!stream) {
    std::memcpy(dst, src, bytes);
    return;
  }
  HWY_DYNAMIC_DISPATCH(stream_copy)
  (static_cast<std::uint8_t*>(dst), static_cast<const std::uint8_t*>(src), bytes);
}

bool streams(std::size_t total) noexcept {
  return total >= stream_threshold();
}

}  // namespace tandem::core
#endif  // HWY_ONCE
