#pragma once
// The one reference reduction of the tests: what a reducing collective must leave, computed
// element by element in double from every rank's input, independently of tandem's kernels.

#include <tandem/half.hpp>
#include <tandem/types.hpp>

#include <algorithm>
#include <cstdint>

namespace tandem::testing {

/// `op` over the inputs of ranks 0..world-1 (`input(r)`), folded in rank order; avg divides once
/// at the end as the collectives do: in the element's precision for f32, f16 and bf16 (rounded
/// once), truncating toward zero for integers. The inputs must keep every partial result exact
/// in double (small integers do); bitwise ops take integer inputs of the element's range (the
/// bits of a negative one are its two's complement, sign-extended).
template <class Input>
double reference_reduce(ReduceOp op, DataType t, int world, Input&& input) {
  double acc = input(0);
  for (int r = 1; r < world; ++r) {
    const double v = input(r);
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg:
        acc += v;
        break;
      case ReduceOp::prod:
        acc *= v;
        break;
      case ReduceOp::min:
        acc = std::min(acc, v);
        break;
      case ReduceOp::max:
        acc = std::max(acc, v);
        break;
      case ReduceOp::band:  // on the integers' two's complement bits
        acc = static_cast<double>(static_cast<std::int64_t>(acc) & static_cast<std::int64_t>(v));
        break;
      case ReduceOp::bor:
        acc = static_cast<double>(static_cast<std::int64_t>(acc) | static_cast<std::int64_t>(v));
        break;
      case ReduceOp::bxor:
        acc = static_cast<double>(static_cast<std::int64_t>(acc) ^ static_cast<std::int64_t>(v));
        break;
    }
  }
  if (op != ReduceOp::avg) return acc;
  const float q = static_cast<float>(acc) / static_cast<float>(world);
  switch (t) {
    case DataType::f64:
      return acc / world;
    case DataType::f32:
      return q;
    case DataType::f16:
      return half_to_float(float_to_half(q));
    case DataType::bf16:
      return bf16_to_float(float_to_bf16(q));
    default:
      return static_cast<double>(static_cast<std::int64_t>(acc) / world);
  }
}

}  // namespace tandem::testing
