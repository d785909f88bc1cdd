#pragma once
/// @file half.hpp
/// Conversions between float and the 16-bit formats tandem reduces (IEEE binary16 and
/// bfloat16), round-to-nearest-even. Values are carried as raw std::uint16_t bits.

#include <cstdint>

namespace tandem {

float half_to_float(std::uint16_t h) noexcept;
std::uint16_t float_to_half(float f) noexcept;
float bf16_to_float(std::uint16_t b) noexcept;
std::uint16_t float_to_bf16(float f) noexcept;

}  // namespace tandem
