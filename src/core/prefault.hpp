#pragma once
// The first call of each code path otherwise pays minor page faults on libtandem's code (a
// file-backed mapping the kernel fills on first execution), many times a steady call's cost
// (docs/benchmarks-small.md). Communicator setup maps all of the library's code at once
// instead.

namespace tandem::core {

/// Maps every page of the executable segments of the library this function is linked into
/// (MADV_POPULATE_READ, Linux 5.14+; elsewhere nothing happens). Cheap: its pages are in the
/// page cache already, so this only fills page tables (about 400 pages).
void prefault_library_code() noexcept;

}  // namespace tandem::core
