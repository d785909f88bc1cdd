#include "files.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <zlib.h>

namespace tandem::data::test {

std::vector<std::uint8_t> idx_bytes(std::uint8_t type, const std::vector<std::uint32_t>& dims,
                                    const std::vector<std::uint8_t>& payload) {
  std::vector<std::uint8_t> out{0, 0, type, static_cast<std::uint8_t>(dims.size())};
  for (std::uint32_t d : dims) {
    out.push_back(static_cast<std::uint8_t>(d >> 24));
    out.push_back(static_cast<std::uint8_t>(d >> 16));
    out.push_back(static_cast<std::uint8_t>(d >> 8));
    out.push_back(static_cast<std::uint8_t>(d));
  }
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

void write_plain(const std::filesystem::path& p, const std::vector<std::uint8_t>& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + p.string());
}

void write_gzip(const std::filesystem::path& p, const std::vector<std::uint8_t>& bytes) {
  gzFile f = gzopen(p.c_str(), "wb9");
  if (f == nullptr) throw std::runtime_error("gzopen failed: " + p.string());
  const int n = bytes.empty() ? 0 : gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  const int rc = gzclose(f);
  if (n != static_cast<int>(bytes.size()) || rc != Z_OK)
    throw std::runtime_error("gzwrite failed: " + p.string());
}

std::vector<std::uint8_t> read_all(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace tandem::data::test
