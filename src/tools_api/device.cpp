// Device memory for the tools: CUDA's from the plugin libtandem_tools_cuda.so (device_cuda.cpp),
// loaded from libtandem's directory at the first request, so that no tool links CUDA.

#include "tools_api/device.hpp"

#include "comm/device/backend.hpp"

#include <tandem/error.hpp>

#include <charconv>
#include <dlfcn.h>
#include <mutex>
#include <string>
#include <sys/stat.h>

namespace tandem::tools_api {
namespace {

using OpenCuda = DeviceMemory* (*)(int index);

constexpr const char* kPluginName = "libtandem_tools_cuda.so";

// The plugin beside libtandem_cuda.so (libtandem's directory, or TANDEM_CUDA_LIBRARY's).
std::string plugin_path() {
  const std::string backend = comm::device_library_path(Device::Kind::cuda);
  const auto cut = backend.rfind('/');
  return (cut == std::string::npos ? std::string() : backend.substr(0, cut + 1)) + kPluginName;
}

OpenCuda load_plugin(std::string_view spec) {
  static std::mutex mutex;
  static OpenCuda open = nullptr;
  const std::lock_guard lock(mutex);
  if (open != nullptr) return open;
  const std::string path = plugin_path();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "--device {}: this tandem was built without the CUDA backend ({} does not exist: "
                 "nvcc and NCCL were not found at build time; see the build's 'tandem: ... CUDA' "
                 "line)",
                 spec, path);
  void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (lib == nullptr) {
    const char* why = ::dlerror();
    TANDEM_THROW(ErrorCode::InvalidArgument, "--device {}: cannot load {}: {}", spec, path,
                 why != nullptr ? why : "unknown error");
  }
  open = reinterpret_cast<OpenCuda>(::dlsym(lib, "tandem_tools_open_cuda"));
  TANDEM_CHECK(open != nullptr, "{} has no tandem_tools_open_cuda: a build of another tandem?",
               path);
  return open;
}

}  // namespace

std::unique_ptr<DeviceMemory> open_device(std::string_view spec, int local_rank) {
  int index = local_rank;
  if (spec.starts_with("cuda:")) {
    const std::string_view n = spec.substr(5);
    const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), index);
    TANDEM_CHECK_ARG(ec == std::errc() && end == n.data() + n.size() && index >= 0,
                     "--device {}: write cuda:N with N a device number", spec);
  } else {
    TANDEM_CHECK_ARG(spec == "cuda", "--device {}: write cpu, cuda or cuda:N", spec);
  }
  return std::unique_ptr<DeviceMemory>(load_plugin(spec)(index));
}

}  // namespace tandem::tools_api
