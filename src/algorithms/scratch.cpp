#include "algorithms/algorithm.hpp"

#include <algorithm>
#include <new>
#include <sys/mman.h>

namespace tandem::algorithms {

namespace {
constexpr std::size_t kPage = 4096;
}

Scratch::~Scratch() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

void Scratch::grow(std::size_t bytes) {
  // Twofold, so that a sequence of slightly larger calls does not map again every time.
  std::size_t want = std::max({bytes, 2 * size_, kPage});
  want = (want + kPage - 1) / kPage * kPage;
  void* p = ::mmap(nullptr, want, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  if (data_ != nullptr) ::munmap(data_, size_);
  data_ = static_cast<std::byte*>(p);
  size_ = want;
}

}  // namespace tandem::algorithms
