#pragma once
// The control connection to one peer: it carries no data, only BYE (the peer closed its
// mesh normally) and ABORT {reason}. Its end of file without a BYE means the peer process
// died: the kernel closes a dead process's sockets, so liveness needs no heartbeat.

#include "core/net.hpp"

#include <tandem/error.hpp>

#include <cstdint>
#include <string>
#include <string_view>

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

}  // namespace tandem::transport
