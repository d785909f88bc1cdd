#pragma once
/// @file shared_buffer.hpp
/// SharedBuffer: memory registered with a communicator (Communicator::allocate()).
///
/// Every rank of a communicator allocates its registered buffers collectively, in the same
/// order and with the same sizes (like NCCL's window registration). The memory of each
/// rank's buffer lives in a shared-memory segment that every peer on the same host has
/// mapped, so collectives whose input and output lie in registered buffers on every rank
/// read the peers' data directly instead of passing it through the transport: an allreduce
/// then copies each byte once. Ranks without a same-host peer (or with TANDEM_SHM_DISABLE=1)
/// get ordinary private memory; every collective works on it as on any other buffer.

#include <tandem/error.hpp>
#include <tandem/types.hpp>

#include <cstddef>
#include <memory>
#include <span>
#include <utility>

namespace tandem {

/// An owned block of registered memory, 4096-byte aligned and zero-filled. Move-only; freed
/// (unmapped on this rank) when destroyed. Destroying it while a peer still maps its copy is
/// safe: each process unmaps its own view. Do not destroy it while a collective that uses it
/// runs. It may outlive the communicator that allocated it (it then stays ordinary memory).
class SharedBuffer {
 public:
  /// What keeps the memory mapped and releases it (an implementation detail of the runtime).
  class Owner {
   public:
    virtual ~Owner() = default;
  };

  /// An empty buffer (data() == nullptr, bytes() == 0).
  SharedBuffer() noexcept = default;
  /// Adopts `bytes` bytes at `data`, kept alive by `owner` (the runtime creates these).
  SharedBuffer(void* data, std::size_t bytes, bool shared, std::unique_ptr<Owner> owner) noexcept
      : data_(data), bytes_(bytes), shared_(shared), owner_(std::move(owner)) {}
  SharedBuffer(SharedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        bytes_(std::exchange(o.bytes_, 0)),
        shared_(std::exchange(o.shared_, false)),
        owner_(std::move(o.owner_)) {}
  SharedBuffer& operator=(SharedBuffer&& o) noexcept {
    if (this != &o) {
      owner_ = std::move(o.owner_);  // releases what this buffer held
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      shared_ = std::exchange(o.shared_, false);
    }
    return *this;
  }
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;
  ~SharedBuffer() = default;

  /// The first byte (nullptr when empty).
  void* data() const noexcept { return data_; }
  /// The size asked for at allocation.
  std::size_t bytes() const noexcept { return bytes_; }
  /// True when the same-host peers map this memory (collectives on it can be one-copy);
  /// false for private memory (no same-host peer, or shared memory disabled).
  bool shared() const noexcept { return shared_; }
  /// True unless empty.
  explicit operator bool() const noexcept { return data_ != nullptr; }

  /// A view of `count` elements of `dtype` starting `offset_bytes` into the buffer.
  /// Throws Error(InvalidArgument) when the range does not fit.
  BufferView view(DataType dtype, std::size_t count, std::size_t offset_bytes = 0) const {
    const std::size_t es = dtype_size(dtype);
    TANDEM_CHECK_ARG(offset_bytes <= bytes_ && count <= (bytes_ - offset_bytes) / es,
                     "SharedBuffer::view: {} elements of {} at byte {} do not fit in a {}-byte "
                     "buffer",
                     count, to_string(dtype), offset_bytes, bytes_);
    return BufferView::raw(static_cast<std::byte*>(data_) + offset_bytes, count, dtype);
  }
  /// A view of the whole buffer as elements of `dtype` (a partial last element is left out).
  BufferView view(DataType dtype) const noexcept {
    return BufferView::raw(data_, bytes_ / dtype_size(dtype), dtype);
  }
  /// The buffer as a span of T (a partial last element is left out).
  template <class T>
  std::span<T> as() const noexcept {
    return {static_cast<T*>(data_), bytes_ / sizeof(T)};
  }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  bool shared_ = false;
  std::unique_ptr<Owner> owner_;
};

}  // namespace tandem
