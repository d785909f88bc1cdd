#pragma once
// Vectorised reduction kernels (Highway, dynamic dispatch to the best instruction set of
// the running CPU). f16 and bf16 are widened to f32, reduced, and rounded back.

#include <tandem/types.hpp>

#include <cstddef>

namespace tandem::core {

/// dst[i] = a[i] op b[i] for i < count. dst may alias a or b exactly (not partially).
/// ReduceOp::avg reduces as sum (divide() finishes it).
void reduce(void* dst, const void* a, const void* b, std::size_t count, DataType dtype,
            ReduceOp op) noexcept;

/// dst[i] = dst[i] / divisor: the last step of ReduceOp::avg. Integers divide truncating
/// toward zero; f16/bf16 divide in f32.
void divide(void* dst, std::size_t count, DataType dtype, int divisor) noexcept;

/// The instruction set the kernels dispatch to on this CPU ("AVX3", "AVX2", "SSE4", ...).
const char* kernel_target() noexcept;

}  // namespace tandem::core
