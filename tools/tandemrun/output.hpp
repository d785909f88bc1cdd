#pragma once
// Worker output: bytes from a worker's pipe become whole lines "[rank N]: text\n" on
// tandemrun's own stdout/stderr (one write per batch of whole lines, so ranks never tear
// each other's lines), an optional per-rank log file, and a short tail kept for the
// failure summary.

#include <cstddef>
#include <deque>
#include <string>
#include <string_view>

namespace tandem::tools::tandemrun {

/// Writes all of `data` to `fd` (EINTR/EAGAIN-safe). Once a write to fd fails (EPIPE: the
/// reader went away), later writes to that fd are dropped so supervision carries on.
void write_all(int fd, std::string_view data) noexcept;

/// The last lines a rank printed, on either stream.
class Tail {
 public:
  explicit Tail(std::size_t max_lines = 20) : max_lines_(max_lines) {}
  void push(std::string_view line);
  const std::deque<std::string>& lines() const noexcept { return lines_; }

 private:
  std::size_t max_lines_;
  std::deque<std::string> lines_;
};

/// One stream of one worker.
class LineStream {
 public:
  /// Longest piece written as one line; a longer line is split into pieces of this size,
  /// each with its own prefix.
  static constexpr std::size_t kMaxLine = 64 * 1024;

  /// console_fd: 1, 2, or -1 (redirected: log file only); log_fd: -1 for none. `tail` is
  /// not owned and must outlive this stream.
  LineStream(std::string prefix, int console_fd, int log_fd, Tail* tail)
      : prefix_(std::move(prefix)), console_fd_(console_fd), log_fd_(log_fd), tail_(tail) {}

  /// Consumes bytes read from the pipe; writes every line they complete.
  void feed(std::string_view data);
  /// End of stream: writes a pending partial line (with a newline added).
  void finish();

 private:
  void emit(std::string_view line);
  void flush_batch();

  std::string prefix_;
  int console_fd_;
  int log_fd_;
  Tail* tail_;
  std::string pending_;
  std::string console_batch_;
  std::string log_batch_;
};

}  // namespace tandem::tools::tandemrun
