#pragma once
// Device kernels of the CUDA backend (kernels.cu, built for sm_90 and as PTX for later
// GPUs): the last step of an integer average, which NCCL's ncclAvg leaves to floating
// types, and the deterministic patterns that tandem-perf and the gpu tests write into
// device buffers without a host round trip.

#include <tandem/types.hpp>

#include <cstddef>
#include <cstdint>
#include <cuda_runtime_api.h>

namespace tandem::gpu {

/// data[i] /= divisor for `count` elements of an integer `dtype` (truncating toward zero, as
/// tandem's host kernels do), on `stream`.
void divide_on_device(void* data, std::size_t count, DataType dtype, int divisor,
                      cudaStream_t stream);

/// data[i] = pattern_value(i, rank, seed) as `dtype`, on `stream`.
void fill_pattern(void* data, std::size_t count, DataType dtype, int rank, std::uint32_t seed,
                  cudaStream_t stream);

namespace detail {
// The launches themselves (kernels.cu, which includes nothing that nvcc cannot compile: no
// fmt, no tandem/error.hpp); cudaErrorInvalidValue for a dtype the kernel does not take.
cudaError_t launch_divide(void* data, std::size_t count, DataType dtype, int divisor,
                          cudaStream_t stream) noexcept;
cudaError_t launch_fill(void* data, std::size_t count, DataType dtype, int rank, std::uint32_t seed,
                        cudaStream_t stream) noexcept;
}  // namespace detail

/// The pattern's value at element `index`: an integer in 1..4, exact in every dtype, whose
/// sums, products, minima and maxima over up to 8 ranks stay exact in f16 and bf16 (the host
/// reference computes it with this same function).
constexpr int pattern_value(std::size_t index, int rank, std::uint32_t seed) noexcept {
  return static_cast<int>((index * 7 + static_cast<std::size_t>(rank) * 3 + seed) % 4) + 1;
}

}  // namespace tandem::gpu
