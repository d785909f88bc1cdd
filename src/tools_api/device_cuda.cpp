// tandem-perf's CUDA device memory: built into the plugin libtandem_tools_cuda.so, which
// tools_api/device.cpp loads at the first --device cuda, so that tandem-perf itself links no
// CUDA library and starts as fast as the other tools.

#include "gpu/cuda.hpp"
#include "tools_api/device.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace tandem::tools_api {

class CudaMemory final : public DeviceMemory {
 public:
  explicit CudaMemory(Device d) : device_(d) { gpu::use_device(d); }
  Device device() const noexcept override { return device_; }
  void* allocate(std::size_t bytes) override {
    blocks_.emplace_back(bytes);
    return blocks_.back().get();
  }
  void zero(void* p, std::size_t bytes) override {
    gpu::check_cuda(cudaMemset(p, 0, bytes), "cudaMemset");
  }
  void upload(void* dst, const void* src, std::size_t bytes) override {
    gpu::check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the GPU");
  }
  void download(void* dst, const void* src, std::size_t bytes) override {
    gpu::check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy from the GPU");
  }
  std::string describe() const override {
    return fmt::format("{}: {}", device_.str(), gpu::describe_device(device_.index));
  }
  double copy_gbps(void* dst, const void* src, std::size_t bytes, int iters) override {
    const gpu::Event start(true);
    const gpu::Event stop(true);
    const auto copy = [&] {
      gpu::check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, nullptr),
                      "cudaMemcpyAsync");
    };
    copy();
    copy();
    gpu::check_cuda(cudaEventRecord(start.get(), nullptr), "cudaEventRecord");
    for (int i = 0; i < iters; ++i) copy();
    gpu::check_cuda(cudaEventRecord(stop.get(), nullptr), "cudaEventRecord");
    // Bounded: a device that does not finish is reported, not waited for forever.
    const Deadline deadline = deadline_in(std::chrono::seconds(60));
    cudaError_t e;
    while ((e = cudaEventQuery(stop.get())) == cudaErrorNotReady) {
      if (Clock::now() >= deadline)
        TANDEM_THROW(ErrorCode::Timeout,
                     "tandem-perf: {} device-to-device copies of {} bytes did not finish in 60 s",
                     iters + 2, bytes);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    gpu::check_cuda(e, "the device-to-device copies");
    float ms = 0;
    gpu::check_cuda(cudaEventElapsedTime(&ms, start.get(), stop.get()), "cudaEventElapsedTime");
    return ms > 0 ? static_cast<double>(bytes) * iters / (static_cast<double>(ms) * 1e6) : 0.0;
  }

 private:
  Device device_;
  std::vector<gpu::DeviceMemory> blocks_;
};

}  // namespace tandem::tools_api

// The plugin's one entry point (tools_api/device.cpp loads it by this name): the memory of CUDA
// device `index`, owned by the caller.
extern "C" __attribute__((visibility("default"))) tandem::tools_api::DeviceMemory*
tandem_tools_open_cuda(int index) {
  return new tandem::tools_api::CudaMemory(tandem::Device::cuda(index));
}
