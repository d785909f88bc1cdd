// Loading libtandem_cuda.so registers the NCCL backend for CUDA memory with libtandem: the
// communicator loads the library at its first CUDA buffer (comm/device/backend.hpp).

#include "comm/device/backend.hpp"
#include "gpu/nccl/backend.hpp"

namespace tandem::gpu {
namespace {

[[maybe_unused]] const bool registered = [] {
  comm::register_device_backend(Device::Kind::cuda, &make_nccl_backend);
  return true;
}();

}  // namespace
}  // namespace tandem::gpu
