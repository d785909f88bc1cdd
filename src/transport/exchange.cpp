#include "transport/exchange.hpp"

#include "core/net.hpp"
#include "transport/endpoint.hpp"
#include "transport/mesh.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <poll.h>
#include <sys/socket.h>

namespace tandem::transport {
namespace {

constexpr std::uint32_t kMagic = 0x584e4454;  // "TDNX"

struct Head {
  std::uint32_t magic;
  std::uint32_t count;
  std::uint64_t bytes;  ///< what follows: per record a u32 length and its bytes
};
static_assert(sizeof(Head) == 16);

std::string encode(const std::vector<std::string>& records, std::size_t count) {
  std::uint64_t bytes = 0;
  for (std::size_t i = 0; i < count; ++i) bytes += 4 + records[i].size();
  std::string out(sizeof(Head) + bytes, '\0');
  const Head head{kMagic, static_cast<std::uint32_t>(count), bytes};
  std::memcpy(out.data(), &head, sizeof head);
  char* p = out.data() + sizeof head;
  for (std::size_t i = 0; i < count; ++i) {
    const auto len = static_cast<std::uint32_t>(records[i].size());
    std::memcpy(p, &len, 4);
    std::memcpy(p + 4, records[i].data(), len);
    p += 4 + len;
  }
  return out;
}

[[noreturn]] void malformed(int peer, std::string_view what) {
  TANDEM_THROW(ErrorCode::Internal,
               "rank {} sent a malformed setup exchange ({}); every rank must run the same "
               "tandem build",
               peer, what);
}

void decode(std::string_view body, std::size_t count, int peer, std::vector<std::string>& out) {
  std::size_t at = 0;
  for (std::size_t i = 0; i < count; ++i) {
    std::uint32_t len = 0;
    if (body.size() - at < 4) malformed(peer, "a record runs past its frame");
    std::memcpy(&len, body.data() + at, 4);
    if (len > kMaxRecordBytes || body.size() - at - 4 < len)
      malformed(peer, fmt::format("a record of {} bytes", len));
    out.emplace_back(body.substr(at + 4, len));
    at += 4 + len;
  }
  if (at != body.size()) malformed(peer, "bytes after the last record");
}

// One step: sends `out` to `to` while receiving `count` records from `from`.
class Step {
 public:
  Step(int to, int to_fd, std::string out, int from, int from_fd, std::size_t count)
      : to_(to),
        to_fd_(to_fd),
        out_(std::move(out)),
        from_(from),
        from_fd_(from_fd),
        count_(count) {}

  bool done() const noexcept { return sent_ == out_.size() && have_body_ && got_ == body_.size(); }

  void poll_once(int timeout_ms) {
    pollfd pfds[2];
    nfds_t n = 0;
    if (sent_ < out_.size()) pfds[n++] = {to_fd_, POLLOUT, 0};
    const bool reading = !(have_body_ && got_ == body_.size());
    if (reading) pfds[n++] = {from_fd_, POLLIN, 0};
    const int rc = ::poll(pfds, n, timeout_ms);
    if (rc < 0 && errno != EINTR)
      TANDEM_THROW(ErrorCode::Io, "poll failed in the setup exchange: {}", errno_text(errno));
    if (rc <= 0) return;
    if (sent_ < out_.size()) write_some();
    if (reading) read_some();
  }

  std::string_view body() const noexcept { return body_; }
  int from() const noexcept { return from_; }
  int to() const noexcept { return to_; }
  std::size_t count() const noexcept { return count_; }

 private:
  void write_some() {
    const ssize_t n =
        ::send(to_fd_, out_.data() + sent_, out_.size() - sent_, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      sent_ += static_cast<std::size_t>(n);
    } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      lost(to_, errno_text(errno));
    }
  }

  void read_some() {
    char* dst = have_body_ ? body_.data() + got_ : reinterpret_cast<char*>(&head_) + got_;
    const std::size_t want = (have_body_ ? body_.size() : sizeof head_) - got_;
    const ssize_t n = ::recv(from_fd_, dst, want, MSG_DONTWAIT);
    if (n == 0) lost(from_, "it closed its connection");
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      lost(from_, errno_text(errno));
    }
    got_ += static_cast<std::size_t>(n);
    if (!have_body_ && got_ == sizeof head_) {
      if (head_.magic != kMagic) malformed(from_, "not a setup exchange frame");
      if (head_.count != count_)
        malformed(from_, fmt::format("{} records where {} were due", head_.count, count_));
      if (head_.bytes > count_ * (4 + kMaxRecordBytes))
        malformed(from_, fmt::format("a frame of {} bytes", head_.bytes));
      body_.resize(static_cast<std::size_t>(head_.bytes));
      have_body_ = true;
      got_ = 0;
    }
  }

  [[noreturn]] static void lost(int peer, std::string_view why) {
    TANDEM_THROW(ErrorCode::PeerLost,
                 "rank {} stopped during communicator setup ({}): check that rank's output and "
                 "exit status",
                 peer, why);
  }

  int to_;
  int to_fd_;
  std::string out_;
  std::size_t sent_ = 0;
  int from_;
  int from_fd_;
  std::size_t count_;
  Head head_{};
  bool have_body_ = false;
  std::string body_;
  std::size_t got_ = 0;
};

}  // namespace

std::vector<int> setup_peers(int rank, int size) {
  std::vector<int> out;
  for (long d = 1; d < size; d *= 2) {
    for (long q : {rank + d, rank - d}) {
      const int p = static_cast<int>(((q % size) + size) % size);
      if (p != rank) out.push_back(p);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::string> allgather_records(int rank, int size, std::string mine,
                                           const std::function<int(int peer)>& fd_of,
                                           Deadline deadline) {
  // have[i] is the record of rank (rank + i) mod size.
  std::vector<std::string> have;
  have.reserve(static_cast<std::size_t>(size));
  have.push_back(std::move(mine));
  const auto n = static_cast<std::size_t>(size);
  for (std::size_t d = 1; d < n; d *= 2) {
    const std::size_t count = std::min(have.size(), n - have.size());
    const int to = static_cast<int>((static_cast<std::size_t>(rank) + n - d) % n);
    const int from = static_cast<int>((static_cast<std::size_t>(rank) + d) % n);
    Step step(to, fd_of(to), encode(have, count), from, fd_of(from), count);
    while (!step.done()) {
      const auto now = Clock::now();
      if (now >= deadline)
        TANDEM_THROW(ErrorCode::Timeout,
                     "rank {} waited for rank {} in the setup exchange (step {} of {}) until the "
                     "timeout: is that rank stuck or much slower to start?",
                     rank, from, std::countr_zero(d) + 1, std::bit_width(n - 1));
      step.poll_once(net::poll_timeout_ms(deadline));
    }
    decode(step.body(), count, from, have);
  }
  std::vector<std::string> out(n);
  for (std::size_t i = 0; i < n; ++i)
    out[(static_cast<std::size_t>(rank) + i) % n] = std::move(have[i]);
  return out;
}

}  // namespace tandem::transport
