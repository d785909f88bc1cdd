#pragma once
// The control connection to one peer: it carries no data, only BYE (the peer closed its
// mesh normally) and ABORT {reason}. Its end of file without a BYE means the peer process
// died: the kernel closes a dead process's sockets, so liveness needs no heartbeat.

#include "core/net.hpp"

#include <tandem/error.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

namespace tandem::transport {

class Control {
 public:
  enum class State : std::uint8_t {
    up,       ///< nothing heard
    left,     ///< BYE received
    aborted,  ///< ABORT received (reason(), abort_code())
    lost,     ///< end of file or reset without BYE (reason() says which)
  };

  Control() = default;
  explicit Control(net::Fd fd) : fd_(std::move(fd)) {}

  int fd() const noexcept { return fd_.get(); }
  /// Whether poll() should still watch this socket (false once it reached end of file).
  bool watched() const noexcept { return fd_.valid() && !eof_; }
  State state() const noexcept { return state_; }
  const std::string& reason() const noexcept { return reason_; }
  /// The code of the error that made the peer abort: PeerLost when it only passes on the
  /// loss of another rank.
  ErrorCode abort_code() const noexcept { return abort_code_; }

  /// Reads every frame available without blocking and updates state().
  void read_available() noexcept;
  /// Best effort, non-blocking: the control socket carries nothing else, so they fit.
  void send_bye() noexcept;
  void send_abort(ErrorCode code, std::string_view reason) noexcept;
  void close() noexcept { fd_.reset(); }
  /// The peer is known dead by other means (its shared-memory life lock): lost, with `reason`,
  /// unless it said BYE or ABORT first.
  void mark_lost(std::string reason) noexcept {
    if (state_ != State::up) return;
    state_ = State::lost;
    reason_ = std::move(reason);
  }

 private:
  void send_frame(std::uint32_t type, std::uint32_t code, std::string_view payload) noexcept;
  void parse() noexcept;

  net::Fd fd_;
  State state_ = State::up;
  bool eof_ = false;
  ErrorCode abort_code_ = ErrorCode::Aborted;
  std::string reason_;
  std::string in_;
};

/// Wakes a rank that sleeps on its shared-memory doorbell when a control connection has news
/// (a peer died, aborted or left), so that the news is read at once rather than at the end of
/// the sleep slice: a death that no data socket reports is seen as soon as the kernel closes
/// the dead process's sockets. A thread of its own blocks in epoll_wait on the control
/// sockets, edge-triggered (one call of `wake` per arrival; it reads nothing: the mesh's
/// thread reads the sockets after it wakes), and on an eventfd that stops it.
///
/// The thread lives exactly as long as the mesh: `on_start` runs first on it (the constructor
/// returns once it has; what it throws, the constructor throws) and `on_stop` last, so it can
/// hold what a peer must see released when this process ends (the shared-memory life lock).
class ControlWatch {
 public:
  /// Starts the thread; `wake` runs on it. Throws Io when epoll or the eventfd cannot be made.
  explicit ControlWatch(std::function<void()> wake, std::function<void()> on_start = {},
                        std::function<void()> on_stop = {});
  /// Stops and joins the thread: `wake` is not running and will not run again.
  ~ControlWatch();
  ControlWatch(const ControlWatch&) = delete;
  ControlWatch& operator=(const ControlWatch&) = delete;

  /// Watches one more socket (any thread). The socket must outlive this object or be
  /// removed from it by closing after the destructor ran.
  void watch(int fd);

 private:
  void run() noexcept;

  std::function<void()> wake_;
  std::function<void()> on_stop_;
  net::Fd epoll_;
  net::Fd stop_;
  std::thread thread_;
};

}  // namespace tandem::transport
