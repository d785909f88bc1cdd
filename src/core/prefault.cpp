#include "core/prefault.hpp"

#include <cstdint>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

namespace tandem::core {
namespace {

int populate_segments(dl_phdr_info* info, std::size_t, void* self) {
  const auto here = reinterpret_cast<std::uintptr_t>(self);
  bool ours = false;
  for (int i = 0; i < info->dlpi_phnum && !ours; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    const std::uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    ours = ph.p_type == PT_LOAD && here >= start && here < start + ph.p_memsz;
  }
  if (!ours) return 0;
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || (ph.p_flags & PF_X) == 0) continue;
    const std::uintptr_t start = (info->dlpi_addr + ph.p_vaddr) / page * page;
    const std::uintptr_t end = info->dlpi_addr + ph.p_vaddr + ph.p_memsz;
    (void)::madvise(reinterpret_cast<void*>(start), end - start, MADV_POPULATE_READ);
  }
  return 1;  // found: stop iterating
}

}  // namespace

void prefault_library_code() noexcept {
  ::dl_iterate_phdr(populate_segments, reinterpret_cast<void*>(&prefault_library_code));
}

}  // namespace tandem::core
