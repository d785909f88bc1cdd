#include "transport/control.hpp"

#include "transport/endpoint.hpp"

#include <fmt/format.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <future>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

namespace tandem::transport {
namespace {

constexpr std::uint32_t kBye = 0x43444e01;  // "\x01NDC"
constexpr std::uint32_t kAbort = 0x43444e02;
constexpr std::uint32_t kMaxPayload = 4096;

struct FrameHead {
  std::uint32_t type;
  std::uint32_t code;   ///< ABORT: the ErrorCode behind it
  std::uint32_t bytes;  ///< payload (the reason) that follows
};

}  // namespace

void Control::send_frame(std::uint32_t type, std::uint32_t code,
                         std::string_view payload) noexcept {
  if (!fd_.valid()) return;
  payload = payload.substr(0, kMaxPayload);
  FrameHead h{type, code, static_cast<std::uint32_t>(payload.size())};
  iovec iov[2] = {{&h, sizeof h}, {const_cast<char*>(payload.data()), payload.size()}};
  msghdr m{};
  m.msg_iov = iov;
  m.msg_iovlen = payload.empty() ? 1 : 2;
  while (::sendmsg(fd_.get(), &m, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno == EINTR) {
  }
}

void Control::send_bye() noexcept {
  send_frame(kBye, 0, {});
}
void Control::send_abort(ErrorCode code, std::string_view reason) noexcept {
  send_frame(kAbort, static_cast<std::uint32_t>(code), reason);
}

void Control::read_available() noexcept {
  if (!watched()) return;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd_.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      in_.append(buf, static_cast<std::size_t>(n));
      parse();
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    eof_ = true;
    if (state_ == State::up) {
      state_ = State::lost;
      reason_ = n == 0 ? "its connection closed without a goodbye"
                       : fmt::format("its connection failed: {}", errno_text(errno));
    }
    return;
  }
}

void Control::parse() noexcept {
  while (in_.size() >= sizeof(FrameHead)) {
    FrameHead h;
    std::memcpy(&h, in_.data(), sizeof h);
    if ((h.type != kBye && h.type != kAbort) || h.bytes > kMaxPayload) {
      eof_ = true;
      if (state_ == State::up) {
        state_ = State::lost;
        reason_ = fmt::format("it sent a malformed control frame (type {:#x}, {} bytes)", h.type,
                              h.bytes);
      }
      fd_.reset();
      return;
    }
    if (in_.size() < sizeof h + h.bytes) return;
    if (state_ == State::up) {
      if (h.type == kBye) {
        state_ = State::left;
      } else {
        state_ = State::aborted;
        abort_code_ = h.code == static_cast<std::uint32_t>(ErrorCode::PeerLost)
                          ? ErrorCode::PeerLost
                          : ErrorCode::Aborted;
        reason_.assign(in_.data() + sizeof h, h.bytes);
      }
    }
    in_.erase(0, sizeof h + h.bytes);
  }
}

ControlWatch::ControlWatch(std::function<void()> wake, std::function<void()> on_start,
                           std::function<void()> on_stop)
    : wake_(std::move(wake)),
      on_stop_(std::move(on_stop)),
      epoll_(::epoll_create1(EPOLL_CLOEXEC)),
      stop_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!epoll_ || !stop_)
    TANDEM_THROW(ErrorCode::Io, "cannot make the watch of the control connections: {}",
                 errno_text(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = stop_.get();
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, stop_.get(), &ev) != 0)
    TANDEM_THROW(ErrorCode::Io, "cannot watch the control connections: {}", errno_text(errno));
  std::promise<void> started;
  auto ready = started.get_future();
  thread_ = std::thread([this, &started, on_start = std::move(on_start)] {
    try {
      if (on_start) on_start();
    } catch (...) {
      started.set_exception(std::current_exception());
      return;
    }
    started.set_value();
    run();
    if (on_stop_) on_stop_();
  });
  try {
    ready.get();
  } catch (...) {
    thread_.join();
    throw;
  }
}

ControlWatch::~ControlWatch() {
  const std::uint64_t one = 1;
  while (::write(stop_.get(), &one, sizeof one) < 0 && errno == EINTR) {
  }
  thread_.join();
}

void ControlWatch::watch(int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
    TANDEM_THROW(ErrorCode::Io, "cannot watch a control connection: {}", errno_text(errno));
}

void ControlWatch::run() noexcept {
  std::array<epoll_event, 16> events;
  for (;;) {
    const int n = ::epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()), -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // only a broken epoll fd fails here; the sleep slice still bounds the delay
    }
    bool news = false;
    for (int i = 0; i < n; ++i) {
      if (events[static_cast<std::size_t>(i)].data.fd == stop_.get()) return;
      news = true;
    }
    if (news) wake_();
  }
}

}  // namespace tandem::transport
