#include "gpu/gpu_util.hpp"

#include <cmath>
#include <sys/wait.h>
#include <unistd.h>

namespace tandem::gpu::gputest {

int devices_seen_by_a_child(std::string* why) {
  int pipefd[2];
  if (::pipe(pipefd) != 0) return 0;
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::string reason;
    const int n = device_count(&reason);
    const std::string line = std::to_string(n) + " " + reason;
    (void)!::write(pipefd[1], line.data(), line.size());
    ::_exit(0);
  }
  ::close(pipefd[1]);
  std::string text;
  char buf[256];
  for (ssize_t got; (got = ::read(pipefd[0], buf, sizeof buf)) > 0;)
    text.append(buf, static_cast<std::size_t>(got));
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const auto space = text.find(' ');
  if (why != nullptr && space != std::string::npos) *why = text.substr(space + 1);
  return text.empty() ? 0 : std::stoi(text.substr(0, space));
}

DeviceBuffer::DeviceBuffer(DataType t, std::size_t n) : dtype(t), count(n) {
  const std::size_t bytes = n * dtype_size(t);
  if (!pool_memory) {
    memory = DeviceMemory(bytes);
  } else if (bytes > 0) {
    void* p = nullptr;
    check_cuda(cudaMallocAsync(&p, bytes, cudaStreamLegacy), "cudaMallocAsync");
    pooled.reset(p);
  }
}

void DeviceBuffer::fill(int rank, std::uint32_t seed) const {
  fill_pattern(data(), count, dtype, rank, seed, nullptr);
  check_cuda(cudaDeviceSynchronize(), "fill");
}

void DeviceBuffer::upload(const mptest::Buffer& host) const {
  if (count > 0)
    check_cuda(cudaMemcpy(data(), host.data(), host.bytes(), cudaMemcpyDefault), "copy");
}

mptest::Buffer DeviceBuffer::download() const {
  mptest::Buffer b(dtype, count);
  if (count > 0) check_cuda(cudaMemcpy(b.data(), data(), b.bytes(), cudaMemcpyDefault), "copy");
  return b;
}

void expect_near(DataType dtype, double got, double want, std::string_view what) {
  const double tolerance =
      dtype == DataType::f16 || dtype == DataType::bf16 ? 1e-2 * std::abs(want) : 1e-6;
  EXPECT_NEAR(got, want, tolerance) << what << " (" << to_string(dtype) << ")";
}

mptest::Buffer reduce_inputs(ReduceOp op, DataType t, int rank, std::size_t count) {
  mptest::Buffer b(t, count);
  for (std::size_t i = 0; i < count; ++i) b.set(i, mptest::reduce_input(op, t, rank, i, 1));
  return b;
}

}  // namespace tandem::gpu::gputest
