#pragma once
// The tools' internal API (docs/architecture.md, "The tools' internal API"): memory on a
// device, and what the device is. Host memory needs nothing of this; a CUDA device gets its
// memory, copies and zeroing from device_cuda.cpp when tandem was built with its CUDA backend
// and from device_none.cpp (which says so) otherwise. Not a public API: it changes with the
// tools that use it.

#include <tandem/types.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace tandem::tools_api {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual Device device() const noexcept = 0;
  /// `bytes` of device memory, freed with this object.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void zero(void* p, std::size_t bytes) = 0;
  virtual void upload(void* device_dst, const void* host_src, std::size_t bytes) = 0;
  virtual void download(void* host_dst, const void* device_src, std::size_t bytes) = 0;
  /// "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)".
  virtual std::string describe() const = 0;
  /// The reference a collective's busbw is held against: `bytes` copied device to device
  /// (`src` to `dst`, both of this device) `iters` times after two untimed copies, timed by
  /// events; bytes per second of one copy / 1e9.
  virtual double copy_gbps(void* dst, const void* src, std::size_t bytes, int iters) = 0;
};

/// The memory of `spec` ("cuda" or "cuda:N"; "cuda" is cuda:`local_rank`). Throws
/// InvalidArgument naming what is missing (no CUDA backend in this build, no such device).
std::unique_ptr<DeviceMemory> open_device(std::string_view spec, int local_rank);

}  // namespace tandem::tools_api
