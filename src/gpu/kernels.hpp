#pragma once
// Device kernels of the CUDA backend (built for sm_90 and as PTX for later GPUs): reductions
// and the division that ends an average (reduce.cu; NCCL's ncclAvg leaves integers to it),
// and the deterministic patterns that tandem-perf and the gpu tests write into
// device buffers without a host round trip.

#include <tandem/types.hpp>

#include <cstddef>
#include <cstdint>
#include <cuda_runtime_api.h>

namespace tandem::gpu {

/// data[i] /= divisor for `count` elements of `dtype`, on `stream`, as tandem's host kernels
/// do: integers truncate toward zero, f16/bf16 divide in f32 and round once (reduce.cu).
void divide_on_device(void* data, std::size_t count, DataType dtype, int divisor,
                      cudaStream_t stream);

/// dst[i] = a[i] op b[i] for `count` elements on `stream`, with core::reduce's semantics
/// (integers wrap, floating min/max propagate NaN, f16/bf16 through f32; avg reduces as sum).
/// dst may alias a or b exactly. 16-byte vector loads and stores where all three pointers are
/// 16-byte aligned (reduce.cu).
void reduce_on_device(void* dst, const void* a, const void* b, std::size_t count, DataType dtype,
                      ReduceOp op, cudaStream_t stream);

/// The most buffers reduce_all_on_device() reads, and writes, in one launch.
inline constexpr int kMaxFused = 8;
/// Pointers of one reduce_all_on_device() launch (a kernel parameter, by value).
struct Fused {
  const void* in[kMaxFused] = {};
  void* out[kMaxFused] = {};
};

/// For every element i: in[0][i] op in[1][i] op ... in input order (reduce_on_device's
/// semantics), divided by `divisor` when it is above 1 (an average), written to every out[k][i]:
/// one pass over memory for a whole allreduce of buffers on one device. An output may be an
/// input (exactly). `inputs` and `outputs` at most kMaxFused; 16-byte vectors where every
/// pointer allows.
void reduce_all_on_device(const Fused& pointers, int inputs, int outputs, std::size_t count,
                          DataType dtype, ReduceOp op, int divisor, cudaStream_t stream);

/// data[i] = pattern_value(i, rank, seed) as `dtype`, on `stream`.
void fill_pattern(void* data, std::size_t count, DataType dtype, int rank, std::uint32_t seed,
                  cudaStream_t stream);

namespace detail {
// The launches themselves (the .cu files, which include nothing that nvcc cannot compile: no
// fmt, no tandem/error.hpp); cudaErrorInvalidValue for a dtype the kernel does not take.
cudaError_t launch_divide(void* data, std::size_t count, DataType dtype, int divisor,
                          cudaStream_t stream) noexcept;
cudaError_t launch_reduce(void* dst, const void* a, const void* b, std::size_t count,
                          DataType dtype, ReduceOp op, cudaStream_t stream) noexcept;
cudaError_t launch_reduce_all(const Fused& pointers, int inputs, int outputs, std::size_t count,
                              DataType dtype, ReduceOp op, int divisor,
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
