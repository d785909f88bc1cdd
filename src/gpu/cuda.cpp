#include "gpu/cuda.hpp"

#include <fmt/format.h>

#include <utility>

namespace tandem::gpu {

void check_cuda(cudaError_t e, std::string_view what) {
  if (e == cudaSuccess) [[likely]]
    return;
  TANDEM_THROW(ErrorCode::Io,
               "{} failed: {} ({}). CUDA_LAUNCH_BLOCKING=1 makes the failing call "
               "report where it failed; nvidia-smi shows the device's state",
               what, cudaGetErrorString(e), cudaGetErrorName(e));
}

int device_count(std::string* why) noexcept {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess && n > 0) return n;
  if (why != nullptr) {
    try {
      *why = e == cudaSuccess ? std::string("no CUDA device is visible (CUDA_VISIBLE_DEVICES?)")
                              : fmt::format("{} ({})", cudaGetErrorString(e), cudaGetErrorName(e));
    } catch (...) {
    }
  }
  (void)cudaGetLastError();  // so that the next call does not report this error again
  return 0;
}

std::string describe_device(int index) {
  cudaDeviceProp p{};
  check_cuda(cudaGetDeviceProperties(&p, index), fmt::format("cudaGetDeviceProperties({})", index));
  return fmt::format("{} (sm_{}{}, {:.1f} GiB)", p.name, p.major, p.minor,
                     static_cast<double>(p.totalGlobalMem) / (1u << 30));
}

void use_device(Device device) {
  std::string why;
  const int n = device_count(&why);
  TANDEM_CHECK_ARG(device.is_cuda() && device.index >= 0 && device.index < n,
                   "{} is not a usable CUDA device: {}", device.str(),
                   n == 0 ? why : fmt::format("this process sees {} device(s), 0..{}", n, n - 1));
  check_cuda(cudaSetDevice(device.index), fmt::format("cudaSetDevice({})", device.index));
}

Stream::Stream() {
  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
}

Stream::~Stream() {
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

Event::Event(bool timing) {
  check_cuda(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming),
             "cudaEventCreate");
}

Event::~Event() {
  if (event_ != nullptr) (void)cudaEventDestroy(event_);
}

DeviceMemory::DeviceMemory(std::size_t bytes) : bytes_(bytes) {
  if (bytes > 0)
    check_cuda(cudaMalloc(&data_, bytes), fmt::format("cudaMalloc of {} bytes", bytes));
}

DeviceMemory::~DeviceMemory() {
  if (data_ != nullptr) (void)cudaFree(data_);
}

DeviceMemory::DeviceMemory(DeviceMemory&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) (void)cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

}  // namespace tandem::gpu
