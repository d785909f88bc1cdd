#pragma once
// Vectorised reduction kernels (Highway, dynamic dispatch to the best instruction set of
// the running CPU). f16 and bf16 are widened to f32, reduced, and rounded back.

#include <tandem/types.hpp>

#include <cstddef>

namespace tandem::core {

/// dst[i] = a[i] op b[i] for i < count. dst may alias a or b exactly (not partially); any
/// alignment and any count work, and nothing outside the `count` elements is read or written.
/// ReduceOp::avg reduces as sum (divide() finishes it).
/// - integers: sum and prod wrap modulo 2^bits (two's complement), as NCCL and Gloo do;
/// - floating min/max return NaN when either input is NaN (as torch.minimum/maximum);
/// - f16/bf16: widened to f32, reduced, rounded back to nearest even (NaN stays NaN);
/// - band/bor/bxor: integers only; for a floating `dtype` (applies_to() is false) dst is left as
///   it is, and callers validate before they get here.
void reduce(void* dst, const void* a, const void* b, std::size_t count, DataType dtype,
            ReduceOp op) noexcept;

/// dst[i] = dst[i] / divisor: the last step of ReduceOp::avg. Integers divide truncating
/// toward zero; f16/bf16 divide in f32 and round once. divisor 0 or 1 leaves dst unchanged.
void divide(void* dst, std::size_t count, DataType dtype, int divisor) noexcept;

/// Outputs of reduce() of at least this many bytes, out of place (dst is neither a nor b), are
/// written with non-temporal (streaming) stores, which skip reading the destination into the
/// cache and leave the cache to the inputs. Default: the last-level cache size, at most 16 MiB.
/// set_stream_threshold(0) restores the default; SIZE_MAX turns streaming off. Process-wide; meant
/// for benchmarks and tests.
std::size_t stream_threshold() noexcept;
void set_stream_threshold(std::size_t bytes) noexcept;

/// The instruction set the kernels dispatch to on this CPU ("AVX3", "AVX2", "SSE4", ...).
const char* kernel_target() noexcept;

}  // namespace tandem::core
