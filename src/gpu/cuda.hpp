#pragma once
// The CUDA runtime as tandem uses it: errors turned into tandem::Error with what to do,
// the device count (0, with the reason, on a machine without a GPU or driver), and owners
// of streams, events and device memory.

#include <tandem/error.hpp>
#include <tandem/types.hpp>

#include <cstddef>
#include <cuda_runtime_api.h>
#include <string>
#include <string_view>

namespace tandem::gpu {

/// Throws Error(Io) "<what> failed: <CUDA's message> (<error name>)" unless `e` is success.
void check_cuda(cudaError_t e, std::string_view what);

/// Devices this process sees; 0 when there is none or no usable driver (*why says which).
int device_count(std::string* why = nullptr) noexcept;

/// "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)" for device `index`.
std::string describe_device(int index);

/// Makes `device` current on the calling thread; InvalidArgument when it does not exist.
void use_device(Device device);

/// The stream a device call's buffers are written and read on (Call::stream, else the
/// legacy default stream).
inline cudaStream_t caller_stream(void* stream) noexcept {
  return stream != nullptr ? static_cast<cudaStream_t>(stream) : cudaStreamLegacy;
}

/// A non-blocking stream of the current device, destroyed with its owner.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const noexcept { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

/// An event, without timing unless asked (cheapest to record and query).
class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const noexcept { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

/// Device memory of the current device.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  explicit DeviceMemory(std::size_t bytes);
  ~DeviceMemory();
  DeviceMemory(DeviceMemory&& other) noexcept;
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;
  void* get() const noexcept { return data_; }
  std::size_t size() const noexcept { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace tandem::gpu
