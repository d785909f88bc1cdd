// Device reduction kernels: dst[i] = a[i] op b[i] for every dtype and op of tandem, with the
// host kernels' semantics (core/reduce.hpp): integers wrap, floating min/max propagate NaN,
// f16/bf16 are widened to f32, reduced and rounded back once. 16-byte vector loads and stores
// where the three pointers allow, element by element for the rest.

#include "gpu/grid.cuh"
#include "gpu/kernels.hpp"

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <type_traits>

namespace tandem::gpu {
namespace {

using grid::blocks_for;
using grid::kThreads;

// What an element is computed in: f32 for the 16-bit floats, itself otherwise.
template <class T>
struct Wide {
  using type = T;
  __device__ static T up(T v) { return v; }
  __device__ static T down(T v) { return v; }
};
template <>
struct Wide<__half> {
  using type = float;
  __device__ static float up(__half v) { return __half2float(v); }
  __device__ static __half down(float v) { return __float2half_rn(v); }
};
template <>
struct Wide<__nv_bfloat16> {
  using type = float;
  __device__ static float up(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 down(float v) { return __float2bfloat16_rn(v); }
};

template <class W>
__device__ W apply(W x, W y, ReduceOp op) {
  if constexpr (std::is_integral_v<W>) {
    // Wrapping arithmetic: in the unsigned type of the same width.
    using U = std::make_unsigned_t<W>;
    switch (op) {
      case ReduceOp::prod:
        return static_cast<W>(static_cast<U>(x) * static_cast<U>(y));
      case ReduceOp::min:
        return x < y ? x : y;
      case ReduceOp::max:
        return x > y ? x : y;
      default:  // sum, avg
        return static_cast<W>(static_cast<U>(x) + static_cast<U>(y));
    }
  } else {
    switch (op) {
      case ReduceOp::prod:
        return x * y;
      case ReduceOp::min:
        return x != x ? x : (y != y ? y : (x < y ? x : y));
      case ReduceOp::max:
        return x != x ? x : (y != y ? y : (x > y ? x : y));
      default:
        return x + y;
    }
  }
}

template <class T>
__device__ T reduce_one(T x, T y, ReduceOp op) {
  using W = Wide<T>;
  return W::down(apply<typename W::type>(W::up(x), W::up(y), op));
}

// `vectors` 16-byte vectors first (0 when the pointers are not all 16-byte aligned), then
// the elements after them one by one.
template <class T>
__global__ void reduce_kernel(T* dst, const T* a, const T* b, std::size_t count,
                              std::size_t vectors, ReduceOp op) {
  constexpr int kPer = 16 / sizeof(T);
  const std::size_t first = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t v = first; v < vectors; v += stride) {
    uint4 x = reinterpret_cast<const uint4*>(a)[v];
    const uint4 y = reinterpret_cast<const uint4*>(b)[v];
    T* xs = reinterpret_cast<T*>(&x);
    const T* ys = reinterpret_cast<const T*>(&y);
#pragma unroll
    for (int k = 0; k < kPer; ++k) xs[k] = reduce_one(xs[k], ys[k], op);
    reinterpret_cast<uint4*>(dst)[v] = x;
  }
  for (std::size_t i = vectors * kPer + first; i < count; i += stride)
    dst[i] = reduce_one(a[i], b[i], op);
}

template <class T>
__global__ void divide_kernel(T* data, std::size_t count, int divisor) {
  using W = Wide<T>;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    data[i] = W::down(W::up(data[i]) / static_cast<typename W::type>(divisor));
}

template <class T>
void reduce_as(void* dst, const void* a, const void* b, std::size_t count, ReduceOp op,
               cudaStream_t stream) {
  const bool aligned =
      ((reinterpret_cast<std::uintptr_t>(dst) | reinterpret_cast<std::uintptr_t>(a) |
        reinterpret_cast<std::uintptr_t>(b)) %
       16) == 0;
  const std::size_t vectors = aligned ? count / (16 / sizeof(T)) : 0;
  reduce_kernel<T><<<blocks_for(aligned ? vectors : count), kThreads, 0, stream>>>(
      static_cast<T*>(dst), static_cast<const T*>(a), static_cast<const T*>(b), count, vectors, op);
}

template <class T>
void divide_as(void* data, std::size_t count, int divisor, cudaStream_t stream) {
  divide_kernel<T>
      <<<blocks_for(count), kThreads, 0, stream>>>(static_cast<T*>(data), count, divisor);
}

// Calls f.template operator()<T>() for the element type of `dtype`.
template <class F>
void dispatch(DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::f32:
      return f.template operator()<float>();
    case DataType::f64:
      return f.template operator()<double>();
    case DataType::f16:
      return f.template operator()<__half>();
    case DataType::bf16:
      return f.template operator()<__nv_bfloat16>();
    case DataType::i8:
      return f.template operator()<std::int8_t>();
    case DataType::u8:
      return f.template operator()<std::uint8_t>();
    case DataType::i32:
      return f.template operator()<std::int32_t>();
    case DataType::i64:
      return f.template operator()<long long>();
  }
}

}  // namespace

namespace detail {

cudaError_t launch_reduce(void* dst, const void* a, const void* b, std::size_t count,
                          DataType dtype, ReduceOp op, cudaStream_t stream) noexcept {
  if (count == 0) return cudaSuccess;
  dispatch(dtype, [&]<class T>() { reduce_as<T>(dst, a, b, count, op, stream); });
  return cudaGetLastError();
}

cudaError_t launch_divide(void* data, std::size_t count, DataType dtype, int divisor,
                          cudaStream_t stream) noexcept {
  if (count == 0 || divisor == 0 || divisor == 1) return cudaSuccess;
  dispatch(dtype, [&]<class T>() { divide_as<T>(data, count, divisor, stream); });
  return cudaGetLastError();
}

}  // namespace detail
}  // namespace tandem::gpu
