#pragma once
// A fresh directory under the system's temp dir for one test, removed with its content when
// the object goes (plain filesystem calls: safe in a gtest parent before it forks ranks).

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>

namespace tandem::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tandem-test-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed: " + tmpl);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const noexcept { return path_; }
  std::string str() const { return path_.string(); }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  /// The path of `name` in the directory, as a string.
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  /// Creates a fifo named `name` in the directory and returns its path.
  std::string fifo(const std::string& name) const {
    std::string p = file(name);
    if (::mkfifo(p.c_str(), 0600) != 0) throw std::runtime_error("mkfifo failed: " + p);
    return p;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace tandem::testing
