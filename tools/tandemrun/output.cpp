#include "output.hpp"

#include <algorithm>
#include <cerrno>
#include <poll.h>
#include <set>
#include <unistd.h>

namespace tandem::tools::tandemrun {
namespace {

std::set<int>& failed_fds() {
  static std::set<int> fds;  // tandemrun writes from one thread only
  return fds;
}

// Backs `n` up to the start of a UTF-8 sequence so that a split line stays valid text.
std::size_t utf8_boundary(std::string_view s, std::size_t n) {
  std::size_t back = 0;
  while (back < 3 && n - back > 0 && (static_cast<unsigned char>(s[n - back]) & 0xC0) == 0x80)
    ++back;
  return back < n ? n - back : n;
}

}  // namespace

void write_all(int fd, std::string_view data) noexcept {
  if (fd < 0 || data.empty() || failed_fds().contains(fd)) return;
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 1000);
    } else {
      failed_fds().insert(fd);
      return;
    }
  }
}

void Tail::push(std::string_view line) {
  constexpr std::size_t kKeep = 1000;  // a summary shows the start of very long lines
  if (line.size() > kKeep) line = line.substr(0, kKeep);
  lines_.emplace_back(line);
  while (lines_.size() > max_lines_) lines_.pop_front();
}

void LineStream::feed(std::string_view data) {
  pending_.append(data);
  std::size_t start = 0;
  while (true) {
    const std::string_view rest = std::string_view(pending_).substr(start);
    const std::size_t nl = rest.find('\n');
    if (nl != std::string_view::npos && nl <= kMaxLine) {
      emit(rest.substr(0, nl));
      start += nl + 1;
    } else if (rest.size() >= kMaxLine) {
      const std::size_t cut = utf8_boundary(rest, kMaxLine);
      emit(rest.substr(0, cut));
      start += cut;
    } else {
      break;
    }
  }
  pending_.erase(0, start);
  flush_batch();
}

void LineStream::finish() {
  if (!pending_.empty()) {
    emit(pending_);
    pending_.clear();
  }
  flush_batch();
}

void LineStream::emit(std::string_view line) {
  if (console_fd_ >= 0) {
    console_batch_.append(prefix_);
    console_batch_.append(line);
    console_batch_.push_back('\n');
  }
  if (log_fd_ >= 0) {
    log_batch_.append(line);
    log_batch_.push_back('\n');
  }
  if (tail_ != nullptr) tail_->push(line);
}

void LineStream::flush_batch() {
  write_all(console_fd_, console_batch_);
  write_all(log_fd_, log_batch_);
  console_batch_.clear();
  log_batch_.clear();
}

}  // namespace tandem::tools::tandemrun
