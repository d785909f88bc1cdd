#pragma once
// Zero-initialised host memory aligned to 64 bytes (a cache line; what vector kernels and
// the transports' copies like best). Never null, also for 0 bytes, so views of it are valid.

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

namespace tandem::ddp {

class AlignedBuffer {
 public:
  static constexpr std::size_t kAlignment = 64;

  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t bytes) : bytes_(bytes) {
    const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    data_.reset(
        static_cast<std::byte*>(std::aligned_alloc(kAlignment, rounded ? rounded : kAlignment)));
    if (!data_) throw std::bad_alloc();
    std::memset(data_.get(), 0, rounded ? rounded : kAlignment);
  }

  std::byte* data() const noexcept { return data_.get(); }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  struct Free {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> data_;
  std::size_t bytes_ = 0;
};

}  // namespace tandem::ddp
