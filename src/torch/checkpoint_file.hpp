#pragma once
// Durable file I/O of checkpoints: a file written in full, fsynced and renamed over its target
// (the directory fsynced too), and files read with a bound on their size. Also a testing-only
// probe at every step of a write, so that tests can kill the writer between any two of them.

#include <tandem/error.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

namespace tandem::torch::detail {

namespace fs = std::filesystem;

inline std::string errno_text(int err) {
  return std::strerror(err);
}

// ---- testing only ----------------------------------------------------------------------------
// Called before each step that changes the checkpoint directory: "open", "write" (offset: the
// bytes already in the file), "fsync", "close", "rename", "fsync-dir", "remove" (an old
// checkpoint or a stale temporary file). A test sets `before` in a forked child to
// raise(SIGKILL) at its k-th call, and `chunk_bytes` to split the data into several writes.
// Null (the default) costs one load and branch per step.
struct WriteProbe {
  void (*before)(std::string_view step, const std::filesystem::path& file,
                 std::uint64_t offset) = nullptr;
  std::size_t chunk_bytes = 0;  // 0: one write() for the whole file (as few as it takes)
};
// The process's probe (defined in checkpoint.cpp).
WriteProbe& write_probe() noexcept;

inline void probe(std::string_view step, const std::filesystem::path& file,
                  std::uint64_t offset = 0) {
  if (auto* before = write_probe().before) before(step, file, offset);
}

// An fd closed on every path.
class Fd {
 public:
  explicit Fd(int fd) noexcept : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const noexcept { return fd_; }
  int release() noexcept { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

inline void fsync_dir(const fs::path& dir) {
  probe("fsync-dir", dir);
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0 || ::fsync(fd.get()) != 0)
    TANDEM_THROW(ErrorCode::Io, "checkpoint: fsync of directory {} failed: {}", dir.string(),
                 errno_text(errno));
}

// Writes `bytes` to `tmp`, fsyncs it and renames it over `target`, then fsyncs the directory.
// On failure the temporary file is removed and `target` is untouched.
inline void write_atomically(const fs::path& tmp, const fs::path& target, std::string_view bytes) {
  int err = 0;
  const char* stage = "open";
  {
    probe("open", tmp);
    Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd.get() < 0) {
      TANDEM_THROW(ErrorCode::Io,
                   "checkpoint: cannot create {}: {}; check that the directory is "
                   "writable",
                   tmp.string(), errno_text(errno));
    }
    const std::size_t chunk =
        write_probe().chunk_bytes != 0 ? write_probe().chunk_bytes : bytes.size();
    std::size_t done = 0;
    while (done < bytes.size() && err == 0) {
      probe("write", tmp, done);
      const ssize_t n =
          ::write(fd.get(), bytes.data() + done, std::min(chunk, bytes.size() - done));
      if (n > 0) {
        done += static_cast<std::size_t>(n);
      } else if (n < 0 && errno != EINTR) {
        err = errno;
        stage = "write";
      } else if (n == 0) {
        err = EIO;
        stage = "write";
      }
    }
    if (err == 0) probe("fsync", tmp, done);
    if (err == 0 && ::fsync(fd.get()) != 0) {
      err = errno;
      stage = "fsync";
    }
    if (err == 0) probe("close", tmp, done);
    if (err == 0 && ::close(fd.release()) != 0) {
      err = errno;
      stage = "close";
    }
  }
  if (err == 0) probe("rename", target);
  if (err == 0 && ::rename(tmp.c_str(), target.c_str()) != 0) {
    err = errno;
    stage = "rename";
  }
  if (err != 0) {
    ::unlink(tmp.c_str());
    TANDEM_THROW(ErrorCode::Io,
                 "checkpoint: {} of {} ({} bytes) failed: {}; the temporary file was removed and "
                 "the previous checkpoint is kept. Free space or choose another checkpoint "
                 "directory",
                 stage, tmp.string(), bytes.size(), errno_text(err));
  }
  fsync_dir(target.parent_path().empty() ? fs::path(".") : target.parent_path());
}

inline std::string read_bounded(const fs::path& path, std::uint64_t max_bytes) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0)
    TANDEM_THROW(ErrorCode::Io, "cannot open {}: {}", path.string(), errno_text(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    TANDEM_THROW(ErrorCode::Io, "cannot stat {}: {}", path.string(), errno_text(errno));
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > max_bytes)
    TANDEM_THROW(ErrorCode::Io, "{} is {} bytes, more than the {} a checkpoint may have",
                 path.string(), size, max_bytes);
  std::string bytes(static_cast<std::size_t>(size), '\0');
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      TANDEM_THROW(ErrorCode::Io, "reading {} failed: {}", path.string(), errno_text(errno));
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  bytes.resize(done);
  return bytes;
}

}  // namespace tandem::torch::detail
