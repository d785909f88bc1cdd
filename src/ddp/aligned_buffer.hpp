#pragma once
// Zero-initialised host memory aligned to 64 bytes (a cache line; what vector kernels and
// the transports' copies like best). Never null, also for 0 bytes, so views of it are valid.
// Bucket memory comes from the communicator's registered pool instead (every rank lays out
// the same buckets in the same order), so that a bucket allreduce runs one-copy.

#include <tandem/communicator.hpp>
#include <tandem/shared_buffer.hpp>

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

  /// Collective over `comm` when it has peers (Communicator::allocate); private otherwise.
  AlignedBuffer(std::size_t bytes, Communicator& comm) {
    if (comm.size() == 1) {
      *this = AlignedBuffer(bytes);
      return;
    }
    bytes_ = bytes;
    shared_ = comm.allocate(bytes);
  }

  std::byte* data() const noexcept {
    return shared_ ? static_cast<std::byte*>(shared_.data()) : data_.get();
  }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  struct Free {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> data_;
  SharedBuffer shared_;
  std::size_t bytes_ = 0;
};

}  // namespace tandem::ddp
