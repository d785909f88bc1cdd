#include "tools_api/device.hpp"

#include <tandem/error.hpp>

namespace tandem::tools_api {

std::unique_ptr<DeviceMemory> open_device(std::string_view spec, int) {
  TANDEM_THROW(ErrorCode::InvalidArgument,
               "--device {}: this tandem-perf was built without the CUDA backend (nvcc and NCCL "
               "were not found at build time; see the build's 'tandem: ... CUDA' line)",
               spec);
}

}  // namespace tandem::tools_api
