#include <tandem/half.hpp>

#include <bit>
#include <cstdint>

namespace tandem {

float half_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f)  // inf / NaN (payload kept, as the F16C instructions do)
    return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
  // Zero or subnormal: mant * 2^-24, exact in float.
  const float mag = static_cast<float>(mant) * 0x1p-24f;
  return sign ? -mag : mag;
}

std::uint16_t float_to_half(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u)  // inf, or NaN made quiet with the top payload bits kept
    return static_cast<std::uint16_t>(sign | 0x7c00u |
                                      (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0u));
  if (ax >= 0x477ff000u)  // >= 65520: rounds to infinity
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (ax >= 0x38800000u) {  // normal half: rebias, round to nearest even on bit 13
    const std::uint32_t odd = (ax >> 13) & 1u;
    return static_cast<std::uint16_t>(sign | ((ax - 0x38000000u + 0xfffu + odd) >> 13));
  }
  // Subnormal half (or zero): adding 0.5 places the value's 2^-24 units in the low mantissa
  // bits of a float in [0.5, 1); the FPU rounds to nearest even for us.
  const float shifted = std::bit_cast<float>(ax) + 0.5f;
  return static_cast<std::uint16_t>(sign | (std::bit_cast<std::uint32_t>(shifted) - 0x3f000000u));
}

float bf16_to_float(std::uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

std::uint16_t float_to_bf16(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u)  // NaN: keep it a (quiet) NaN
    return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace tandem
