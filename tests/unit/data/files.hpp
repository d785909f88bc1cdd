#pragma once
// Helpers of the data tests: a temporary directory and small IDX files written plain or
// gzip-compressed.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tandem::data::test {

/// A fresh directory under the test temp dir, removed with its content on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

/// The bytes of an IDX file: magic 00 00 <type> <ndim>, big-endian dims, then `payload`.
std::vector<std::uint8_t> idx_bytes(std::uint8_t type, const std::vector<std::uint32_t>& dims,
                                    const std::vector<std::uint8_t>& payload);
void write_plain(const std::filesystem::path& p, const std::vector<std::uint8_t>& bytes);
void write_gzip(const std::filesystem::path& p, const std::vector<std::uint8_t>& bytes);
std::vector<std::uint8_t> read_all(const std::filesystem::path& p);

}  // namespace tandem::data::test
