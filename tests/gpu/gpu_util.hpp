#pragma once
// What the gpu tests share: the device count as a forked child sees it (a parent that
// initialised CUDA could not fork ranks that use it), buffers of device memory with the
// reference patterns of tests/mp, and the comparison with f16/bf16's tolerance.

#include "gpu/cuda.hpp"
#include "gpu/kernels.hpp"
#include "mp/mp_util.hpp"

#include <tandem/types.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace tandem::gpu::gputest {

/// CUDA devices a forked child sees; 0 with the reason in *why.
int devices_seen_by_a_child(std::string* why);

#define REQUIRE_GPUS(n)                                                               \
  do {                                                                                \
    std::string why;                                                                  \
    const int have = ::tandem::gpu::gputest::devices_seen_by_a_child(&why);           \
    if (have < (n))                                                                   \
      GTEST_SKIP() << "needs " << (n) << " CUDA device(s), this machine has " << have \
                   << (have == 0 ? " (" + why + ")"                                   \
                                 : std::string(" (NCCL 2.28 refuses two ranks on "    \
                                               "one GPU)"));                          \
  } while (0)

/// Set in a rank's process: its DeviceBuffers come from CUDA's stream-ordered pool
/// (cudaMallocAsync), which legacy CUDA IPC cannot share, so that the CUDA IPC backend stages
/// its calls.
inline bool pool_memory = false;

/// `count` elements of `dtype` on the current device (cudaMalloc, or the pool).
struct DeviceBuffer {
  DeviceBuffer(DataType t, std::size_t n);
  BufferView view(int device) const { return {data(), count, dtype, Device::cuda(device)}; }
  void* data() const { return pooled ? pooled.get() : memory.get(); }
  /// pattern(i, rank) with `seed`, written on the device.
  void fill(int rank, std::uint32_t seed) const;
  /// `host` (of this dtype and count) copied to the device.
  void upload(const mptest::Buffer& host) const;
  mptest::Buffer download() const;
  DataType dtype;
  std::size_t count;
  DeviceMemory memory;
  struct Free {
    void operator()(void* p) const { (void)cudaFree(p); }
  };
  std::unique_ptr<void, Free> pooled;
};

inline double pattern(std::size_t i, int rank) {
  return pattern_value(i, rank, 0);
}

/// EXPECT_NEAR with f16/bf16's relative tolerance (1e-2), 1e-6 otherwise.
void expect_near(DataType dtype, double got, double want, std::string_view what);

/// Inputs of a reduction with `op` on `rank`, as tests/mp makes them.
mptest::Buffer reduce_inputs(ReduceOp op, DataType t, int rank, std::size_t count);

inline constexpr std::size_t kAwkward[] = {0, 1, 7, 1023, 65537};

}  // namespace tandem::gpu::gputest
