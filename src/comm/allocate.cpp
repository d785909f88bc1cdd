// Communicator::allocate: registered memory from the mesh's region pool when this rank has
// same-host peers over shared memory, private memory otherwise.

#include "comm/impl.hpp"
#include "transport/regions.hpp"

#include <tandem/communicator.hpp>
#include <tandem/error.hpp>

#include <cstdlib>
#include <cstring>
#include <new>

namespace tandem {
namespace {

constexpr std::size_t kAlignment = 4096;  // as a registered region's data

class PrivateOwner final : public SharedBuffer::Owner {
 public:
  explicit PrivateOwner(std::size_t bytes) {
    const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    data_ = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
    if (data_ == nullptr) throw std::bad_alloc();
    std::memset(data_, 0, rounded == 0 ? kAlignment : rounded);
  }
  ~PrivateOwner() override { std::free(data_); }
  PrivateOwner(const PrivateOwner&) = delete;
  PrivateOwner& operator=(const PrivateOwner&) = delete;
  void* data() const noexcept { return data_; }

 private:
  void* data_ = nullptr;
};

}  // namespace

SharedBuffer Communicator::allocate(std::size_t bytes) {
  Impl& impl = *impl_;
  if (impl.runner.failure.poisoned.load(std::memory_order_acquire)) {
    std::lock_guard lock(impl.runner.failure.mutex);
    TANDEM_THROW(ErrorCode::Aborted,
                 "Communicator::allocate: the communicator failed earlier ({}); create a new one",
                 impl.runner.failure.message);
  }
  std::shared_ptr<transport::RegionPool> pool;
  if (impl.runner.mesh) pool = impl.runner.mesh->regions();
  if (!pool) {
    auto owner = std::make_unique<PrivateOwner>(bytes);
    void* data = owner->data();
    return SharedBuffer(data, bytes, false, std::move(owner));
  }
  try {
    return pool->allocate(bytes, *impl.rendezvous.store, deadline_in(impl.config.timeout()),
                          impl.rendezvous.check_peers);
  } catch (const Error& e) {
    throw Error(e.code(),
                fmt::format("Communicator::allocate({} bytes) on rank {}: {}", bytes, impl.id.rank,
                            e.message()),
                __FILE__, __LINE__);
  }
}

}  // namespace tandem
