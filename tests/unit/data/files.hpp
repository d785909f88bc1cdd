#pragma once
// Helpers of the data tests: a temporary directory and small IDX files written plain or
// gzip-compressed.

#include "support/temp_dir.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tandem::data::test {

using tandem::testing::TempDir;

/// The bytes of an IDX file: magic 00 00 <type> <ndim>, big-endian dims, then `payload`.
std::vector<std::uint8_t> idx_bytes(std::uint8_t type, const std::vector<std::uint32_t>& dims,
                                    const std::vector<std::uint8_t>& payload);
void write_plain(const std::filesystem::path& p, const std::vector<std::uint8_t>& bytes);
void write_gzip(const std::filesystem::path& p, const std::vector<std::uint8_t>& bytes);
std::vector<std::uint8_t> read_all(const std::filesystem::path& p);

}  // namespace tandem::data::test
