// Loading libtandem_cuda.so registers the CUDA backends (NCCL, CUDA IPC; gpu/choice.hpp picks)
// with libtandem: the communicator loads the library at its first CUDA buffer
// (comm/device/backend.hpp).

#include "comm/device/backend.hpp"
#include "gpu/choice.hpp"

namespace tandem::gpu {
namespace {

[[maybe_unused]] const bool registered = [] {
  comm::register_device_backend(Device::Kind::cuda, &make_cuda_backend);
  return true;
}();

}  // namespace
}  // namespace tandem::gpu
