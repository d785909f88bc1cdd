#include "core/memory.hpp"

#include <cstdio>
#include <cstring>

namespace tandem::core {

ProcessMemory process_memory() noexcept {
  ProcessMemory m;
  std::FILE* f = std::fopen("/proc/self/status", "re");
  if (f == nullptr) return m;
  char line[256];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long long kib = 0;
    if (std::sscanf(line, "VmRSS: %llu kB", &kib) == 1) {
      m.resident = static_cast<std::size_t>(kib) * 1024;
    } else if (std::sscanf(line, "RssShmem: %llu kB", &kib) == 1) {
      m.shared = static_cast<std::size_t>(kib) * 1024;
    } else if (std::sscanf(line, "VmHWM: %llu kB", &kib) == 1) {
      m.peak = static_cast<std::size_t>(kib) * 1024;
    }
  }
  std::fclose(f);
  return m;
}

}  // namespace tandem::core
