// prefault_library_code() maps every page of the code it is linked into: afterwards the
// mapping's resident set (Rss in /proc/self/smaps, pages present in this process's page
// tables) is the whole mapping.

#include "core/prefault.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace tandem::core {
namespace {

struct Sizes {
  long size_kb = 0;
  long rss_kb = 0;
};

// Size and Rss of the mapping of /proc/self/smaps that contains `address`.
std::optional<Sizes> mapping_of(const void* address) {
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  Sizes s;
  while (std::getline(smaps, line)) {
    std::uintptr_t lo = 0;
    std::uintptr_t hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      if (inside) return s;
      inside = a >= lo && a < hi;
      continue;
    }
    if (!inside) continue;
    if (line.rfind("Size:", 0) == 0) std::istringstream(line.substr(5)) >> s.size_kb;
    if (line.rfind("Rss:", 0) == 0) std::istringstream(line.substr(4)) >> s.rss_kb;
  }
  return inside ? std::optional<Sizes>(s) : std::nullopt;
}

TEST(Prefault, EveryPageOfTheCodeIsMapped) {
  prefault_library_code();
  const auto s = mapping_of(reinterpret_cast<const void*>(&prefault_library_code));
  ASSERT_TRUE(s.has_value()) << "no mapping in /proc/self/smaps holds the function";
  EXPECT_GT(s->size_kb, 0);
  EXPECT_EQ(s->rss_kb, s->size_kb) << "some code pages are still unmapped";
}

}  // namespace
}  // namespace tandem::core
