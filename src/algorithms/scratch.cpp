#include "algorithms/algorithm.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>

namespace tandem::algorithms {

namespace {
constexpr std::size_t kAlign = 64;
}

void Scratch::Free::operator()(std::byte* p) const noexcept {
  std::free(p);
}

std::byte* Scratch::get(std::size_t bytes) {
  if (bytes <= size_ && data_) return data_.get();
  // Grow geometrically so that a sequence of slightly larger calls does not reallocate
  // every time; aligned_alloc needs a multiple of the alignment.
  std::size_t want = std::max(bytes, size_ + size_ / 2);
  want = (want + kAlign - 1) / kAlign * kAlign;
  if (want == 0) want = kAlign;
  void* p = std::aligned_alloc(kAlign, want);
  if (p == nullptr) throw std::bad_alloc();
  data_.reset(static_cast<std::byte*>(p));
  size_ = want;
  return data_.get();
}

}  // namespace tandem::algorithms
