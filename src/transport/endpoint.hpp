#pragma once
// What the mesh sees of one peer, whatever the link: two FIFOs of posted requests
// (sends and receives) and a non-blocking progress() that moves bytes. Blocking,
// deadlines and liveness live in the mesh, so every transport gets them the same way.

#include "transport/mesh.hpp"

#include <poll.h>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::transport {

/// FIFO of requests linked through Request::next (the mesh never allocates per request).
class RequestQueue {
 public:
  bool empty() const noexcept { return head_ == nullptr; }
  Request* front() const noexcept { return head_; }
  void push(Request& r) noexcept {
    r.next = nullptr;
    if (tail_ != nullptr)
      tail_->next = &r;
    else
      head_ = &r;
    tail_ = &r;
  }
  /// Unlinks the head. The caller marks it complete afterwards and never touches it again.
  Request* pop() noexcept {
    Request* r = head_;
    head_ = r->next;
    if (head_ == nullptr) tail_ = nullptr;
    return r;
  }
  /// Forgets every request without touching them (they may already be gone).
  void clear() noexcept { head_ = tail_ = nullptr; }

 private:
  Request* head_ = nullptr;
  Request* tail_ = nullptr;
};

/// Called by an endpoint whose peer closed or reset a connection: the mesh knows, from the
/// control socket, whether the peer left normally, aborted or died, and throws accordingly.
class PeerFailureHandler {
 public:
  [[noreturn]] void peer_closed(int peer, std::string_view detail) {
    raise_peer_closed(peer, detail);
    throw_unraised(peer);
  }

 protected:
  ~PeerFailureHandler() = default;
  /// Throws the Error that describes the peer's fate.
  virtual void raise_peer_closed(int peer, std::string_view detail) = 0;

 private:
  [[noreturn]] static void throw_unraised(int peer);
};

class Endpoint {
 public:
  Endpoint(int peer, PeerFailureHandler& failures) : peer_(peer), failures_(failures) {}
  virtual ~Endpoint() = default;
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  virtual Link link() const noexcept = 0;
  int peer() const noexcept { return peer_; }

  void post(Request& r) {
    (r.kind == RequestKind::send ? sends_ : recvs_).push(r);
    on_post(r);
  }
  /// Moves whatever can move without blocking; true when anything moved. Throws Error on a
  /// mismatch, a protocol violation or a lost peer.
  virtual bool progress() = 0;
  /// Forgets every pending request: they are never touched again (the mesh is poisoned).
  virtual void drop() noexcept {
    sends_.clear();
    recvs_.clear();
  }
  /// The sockets to poll() while blocked, and for what (tcp only).
  virtual void add_poll_fds(std::vector<pollfd>& /*out*/) const {}

  bool busy() const noexcept { return !sends_.empty() || !recvs_.empty(); }
  const RequestQueue& sends() const noexcept { return sends_; }
  const RequestQueue& recvs() const noexcept { return recvs_; }

 protected:
  virtual void on_post(Request& /*r*/) {}

  int peer_;
  PeerFailureHandler& failures_;
  RequestQueue sends_;
  RequestQueue recvs_;
};

}  // namespace tandem::transport

namespace tandem::transport {

/// strerror() that is safe when several threads fail at once.
std::string errno_text(int err);

/// "recv_reduce" / "recv" / "send".
std::string_view to_string(RequestKind k) noexcept;

/// Throws Error(Mismatch): `r` (posted to receive from `peer`) met a message with another
/// tag or size.
[[noreturn]] void throw_mismatch(const Request& r, Link link, std::uint32_t tag,
                                 std::uint64_t bytes);

/// Throws Error(Internal): the peer broke the wire protocol (a different tandem build?).
[[noreturn]] void throw_protocol(int peer, Link link, std::string_view what);

}  // namespace tandem::transport
