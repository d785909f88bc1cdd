#include "gpu/kernels.hpp"

#include "gpu/cuda.hpp"

#include <tandem/error.hpp>

namespace tandem::gpu {

void divide_on_device(void* data, std::size_t count, DataType dtype, int divisor,
                      cudaStream_t stream) {
  check_cuda(detail::launch_divide(data, count, dtype, divisor, stream),
             "launching the average's division kernel");
}

void reduce_on_device(void* dst, const void* a, const void* b, std::size_t count, DataType dtype,
                      ReduceOp op, cudaStream_t stream) {
  check_cuda(detail::launch_reduce(dst, a, b, count, dtype, op, stream),
             "launching the reduction kernel");
}

void reduce_all_on_device(const Fused& pointers, int inputs, int outputs, std::size_t count,
                          DataType dtype, ReduceOp op, int divisor, cudaStream_t stream) {
  check_cuda(
      detail::launch_reduce_all(pointers, inputs, outputs, count, dtype, op, divisor, stream),
      "launching the fused reduction kernel");
}

void fill_pattern(void* data, std::size_t count, DataType dtype, int rank, std::uint32_t seed,
                  cudaStream_t stream) {
  check_cuda(detail::launch_fill(data, count, dtype, rank, seed, stream),
             "launching the pattern kernel");
}

}  // namespace tandem::gpu
