#include "gpu/grid.cuh"
#include "gpu/kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace tandem::gpu {
namespace {

using grid::blocks_for;
using grid::kThreads;

template <class T>
__device__ T from_int(int v) {
  return static_cast<T>(v);
}
template <>
__device__ __half from_int<__half>(int v) {
  return __int2half_rn(v);
}
template <>
__device__ __nv_bfloat16 from_int<__nv_bfloat16>(int v) {
  return __int2bfloat16_rn(v);
}

template <class T>
__global__ void fill_kernel(T* data, std::size_t count, int rank, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    data[i] = from_int<T>(pattern_value(i, rank, seed));
}

template <class T>
void fill(void* data, std::size_t count, int rank, std::uint32_t seed, cudaStream_t stream) {
  fill_kernel<T>
      <<<blocks_for(count), kThreads, 0, stream>>>(static_cast<T*>(data), count, rank, seed);
}

}  // namespace

namespace detail {

cudaError_t launch_fill(void* data, std::size_t count, DataType dtype, int rank, std::uint32_t seed,
                        cudaStream_t stream) noexcept {
  if (count == 0) return cudaSuccess;
  switch (dtype) {
    case DataType::f32:
      fill<float>(data, count, rank, seed, stream);
      break;
    case DataType::f64:
      fill<double>(data, count, rank, seed, stream);
      break;
    case DataType::f16:
      fill<__half>(data, count, rank, seed, stream);
      break;
    case DataType::bf16:
      fill<__nv_bfloat16>(data, count, rank, seed, stream);
      break;
    case DataType::i8:
      fill<std::int8_t>(data, count, rank, seed, stream);
      break;
    case DataType::u8:
      fill<std::uint8_t>(data, count, rank, seed, stream);
      break;
    case DataType::i32:
      fill<std::int32_t>(data, count, rank, seed, stream);
      break;
    case DataType::i64:
      fill<long long>(data, count, rank, seed, stream);
      break;
  }
  return cudaGetLastError();
}

}  // namespace detail
}  // namespace tandem::gpu
