#include "algorithms/algorithm.hpp"

namespace tandem::algorithms {

namespace {

// splitmix64 finaliser: every input bit affects every output bit.
constexpr std::uint64_t mix(std::uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

std::uint64_t fingerprint_shape(CollectiveKind kind, DataType dtype, std::size_t count,
                                int root) noexcept {
  // A send must carry the tag its matching recv expects: both sides hash the same kind, and
  // the peer (which differs between the two sides) is left out.
  if (kind == CollectiveKind::recv) kind = CollectiveKind::send;
  if (kind == CollectiveKind::send) root = 0;
  // Three rounds: the small fields share one word, the count and seq get one each.
  const std::uint64_t small = static_cast<std::uint64_t>(kind) |
                              static_cast<std::uint64_t>(dtype) << 8 |
                              static_cast<std::uint64_t>(static_cast<std::uint32_t>(root)) << 32;
  const std::uint64_t h = mix(0x74616e64656dULL ^ small);
  return mix(h ^ static_cast<std::uint64_t>(count));
}

std::uint32_t fingerprint_with(std::uint64_t shape, std::uint64_t seq) noexcept {
  const std::uint64_t h = mix(shape ^ seq);
  return static_cast<std::uint32_t>(h ^ (h >> 32));
}

std::uint32_t fingerprint(CollectiveKind kind, DataType dtype, std::size_t count, int root,
                          std::uint64_t seq) noexcept {
  return fingerprint_with(fingerprint_shape(kind, dtype, count, root), seq);
}

}  // namespace tandem::algorithms
