#include "comm/device/backend.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>
#include <tandem/settings.hpp>

#include <array>
#include <dlfcn.h>
#include <mutex>
#include <string>

namespace tandem::comm {
namespace {

// One factory per Device::Kind (cpu's stays empty).
std::array<DeviceBackendFactory, 2>& registry() {
  static std::array<DeviceBackendFactory, 2> factories{};
  return factories;
}

std::size_t slot(Device::Kind kind) noexcept {
  return static_cast<std::size_t>(kind);
}

// Guards the table (a library being loaded registers itself under it).
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

// One library load at a time.
std::mutex& load_mutex() {
  static std::mutex m;
  return m;
}

DeviceBackendFactory registered(Device::Kind kind) {
  const std::lock_guard lock(registry_mutex());
  return registry()[slot(kind)];
}

// The directory of the object that holds this function (libtandem.so, or the program when
// tandem is linked statically), with a trailing '/'.
std::string own_directory() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<const void*>(&own_directory), &info) == 0 ||
      info.dli_fname == nullptr)
    return {};
  std::string path = info.dli_fname;
  const auto cut = path.rfind('/');
  return cut == std::string::npos ? std::string() : path.substr(0, cut + 1);
}

// Loads the library for `kind` unless it is loaded; its static initialisers register it.
// Returns "" on success, else why it could not be loaded.
std::string load_library(Device::Kind kind) {
  const std::string path = device_library_path(kind);
  if (path.empty()) return "no backend library exists for this kind of device";
  if (::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) != nullptr) {
    TANDEM_DETAIL(init, "loaded the device backend library {}", path);
    return {};
  }
  const char* why = ::dlerror();
  return fmt::format("cannot load {}: {}", path, why != nullptr ? why : "unknown error");
}

}  // namespace

void register_device_backend(Device::Kind kind, DeviceBackendFactory make) noexcept {
  const std::lock_guard lock(registry_mutex());
  registry()[slot(kind)] = make;
}

std::string device_library_path(Device::Kind kind) {
  if (kind != Device::Kind::cuda) return {};
  std::string path = settings::get_string("TANDEM_CUDA_LIBRARY");
  if (path.empty()) path = own_directory() + "libtandem_cuda.so";
  return path;
}

std::unique_ptr<DeviceBackend> make_device_backend(const DeviceSetup& setup) {
  const Device::Kind kind = setup.device.kind;
  TANDEM_CHECK_ARG(kind != Device::Kind::cpu, "{}: host memory has no device backend", setup.label);
  DeviceBackendFactory make = registered(kind);
  std::string why;
  if (make == nullptr) {
    const std::lock_guard lock(load_mutex());
    make = registered(kind);
    if (make == nullptr) why = load_library(kind);
    if (make == nullptr && why.empty()) {
      make = registered(kind);  // its initialisers ran during dlopen
      if (make == nullptr) why = "the library loaded but registered no backend";
    }
  }
  if (make == nullptr)
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "{}: a collective on {} memory needs tandem's CUDA backend, which is not "
                 "available ({}). Build tandem where nvcc and NCCL are installed (CUDA at "
                 "/usr/local/cuda; the build prints whether it found them), or set "
                 "TANDEM_CUDA_LIBRARY to the libtandem_cuda.so to use; or pass host memory",
                 setup.label, setup.device.str(), why);
  return make(setup);
}

}  // namespace tandem::comm
