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
      case ReduceOp::band:
        return x & y;
      case ReduceOp::bor:
        return x | y;
      case ReduceOp::bxor:
        return x ^ y;
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
__device__ T divide_one(T x, int divisor) {
  using W = Wide<T>;
  return W::down(W::up(x) / static_cast<typename W::type>(divisor));
}

// Every element of every input reduced in input order, divided when `divisor` > 1, written to
// every output; one thread reads an element of every input before writing it anywhere, so an
// output may be an input. Each thread keeps kBatch vectors in flight per input (the loads of
// one input are independent), which a memory-bound pass needs to approach the GPU's bandwidth.
template <class T>
__global__ void reduce_all_kernel(Fused p, int inputs, int outputs, std::size_t count,
                                  std::size_t vectors, ReduceOp op, int divisor) {
  constexpr int kPer = 16 / sizeof(T);
  constexpr int kBatch = 4;
  const std::size_t first = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t v0 = first; v0 < vectors; v0 += stride * kBatch) {
    uint4 x[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (v0 + b * stride < vectors) x[b] = static_cast<const uint4*>(p.in[0])[v0 + b * stride];
    for (int k = 1; k < inputs; ++k) {
      uint4 y[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b)
        if (v0 + b * stride < vectors) y[b] = static_cast<const uint4*>(p.in[k])[v0 + b * stride];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        T* xs = reinterpret_cast<T*>(&x[b]);
        const T* ys = reinterpret_cast<const T*>(&y[b]);
#pragma unroll
        for (int j = 0; j < kPer; ++j) xs[j] = reduce_one(xs[j], ys[j], op);
      }
    }
    if (divisor > 1) {
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        T* xs = reinterpret_cast<T*>(&x[b]);
#pragma unroll
        for (int j = 0; j < kPer; ++j) xs[j] = divide_one(xs[j], divisor);
      }
    }
    for (int o = 0; o < outputs; ++o)
#pragma unroll
      for (int b = 0; b < kBatch; ++b)
        if (v0 + b * stride < vectors) static_cast<uint4*>(p.out[o])[v0 + b * stride] = x[b];
  }
  for (std::size_t i = vectors * kPer + first; i < count; i += stride) {
    T x = static_cast<const T*>(p.in[0])[i];
    for (int k = 1; k < inputs; ++k) x = reduce_one(x, static_cast<const T*>(p.in[k])[i], op);
    if (divisor > 1) x = divide_one(x, divisor);
    for (int o = 0; o < outputs; ++o) static_cast<T*>(p.out[o])[i] = x;
  }
}

template <class T>
void reduce_all_as(const Fused& p, int inputs, int outputs, std::size_t count, ReduceOp op,
                   int divisor, cudaStream_t stream) {
  std::uintptr_t bits = 0;
  for (int k = 0; k < inputs; ++k) bits |= reinterpret_cast<std::uintptr_t>(p.in[k]);
  for (int o = 0; o < outputs; ++o) bits |= reinterpret_cast<std::uintptr_t>(p.out[o]);
  const std::size_t vectors = bits % 16 == 0 ? count / (16 / sizeof(T)) : 0;
  reduce_all_kernel<T><<<blocks_for(vectors > 0 ? vectors : count), kThreads, 0, stream>>>(
      p, inputs, outputs, count, vectors, op, divisor);
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

cudaError_t launch_reduce_all(const Fused& p, int inputs, int outputs, std::size_t count,
                              DataType dtype, ReduceOp op, int divisor,
                              cudaStream_t stream) noexcept {
  if (count == 0 || outputs == 0) return cudaSuccess;
  if (inputs < 1 || inputs > kMaxFused || outputs < 0 || outputs > kMaxFused)
    return cudaErrorInvalidValue;
  dispatch(dtype,
           [&]<class T>() { reduce_all_as<T>(p, inputs, outputs, count, op, divisor, stream); });
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
