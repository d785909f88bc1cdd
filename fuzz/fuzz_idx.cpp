// IDX files, gzip-compressed or plain, through parse_idx (the code read_idx runs on a file's
// bytes). Limits are kept small so that a header claiming a large array is refused instead
// of allocating; a file that parses must hold exactly what its header says.

#include <tandem/data.hpp>
#include <tandem/error.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tandem::data::IdxLimits limits;
  limits.max_bytes = std::uint64_t{64} << 20;
  try {
    const auto a = tandem::data::parse_idx(std::as_bytes(std::span(data, size)), limits, "fuzz");
    if (a.bytes.size() != a.count() * tandem::data::idx_type_size(a.type)) std::abort();
  } catch (const tandem::Error&) {
    // Rejected, as it should be; anything else escapes and is reported.
  }
  return 0;
}
