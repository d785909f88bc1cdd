#pragma once
// What the mesh sees of one peer, whatever the link: two FIFOs of posted requests
// (sends and receives) and a non-blocking progress() that moves bytes. Blocking,
// deadlines and liveness live in the mesh, so every transport gets them the same way.

#include "core/net.hpp"
#include "transport/mesh.hpp"

#include <functional>
#include <memory>
#include <poll.h>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::transport {

/// Debug builds check the request queues' links on every change, and the mesh that a posted
/// request is in no queue yet: a request posted again while pending, or changed or destroyed
/// while queued, would otherwise silently lose requests.
#ifdef NDEBUG
inline constexpr bool kCheckQueues = false;
#else
inline constexpr bool kCheckQueues = true;
#endif

/// Throws Error(Internal): a request queue's links are broken (`what` says how).
[[noreturn]] void throw_corrupt_queue(std::string_view what);

/// FIFO of requests linked through Request::next (the mesh never allocates per request).
class RequestQueue {
 public:
  bool empty() const noexcept { return head_ == nullptr; }
  Request* front() const noexcept { return head_; }
  void push(Request& r) {
    if constexpr (kCheckQueues) {
      if ((head_ == nullptr) != (tail_ == nullptr) || (tail_ != nullptr && tail_->next != nullptr))
        throw_corrupt_queue("its last request links to another one");
      if (contains(r)) throw_corrupt_queue("a request was posted again while still pending");
    }
    r.next = nullptr;
    if (tail_ != nullptr)
      tail_->next = &r;
    else
      head_ = &r;
    tail_ = &r;
  }
  /// Unlinks the head. The caller marks it complete afterwards and never touches it again.
  Request* pop() {
    Request* r = head_;
    if constexpr (kCheckQueues) {
      if (r == nullptr) throw_corrupt_queue("pop() on an empty queue");
      if ((r == tail_) != (r->next == nullptr))
        throw_corrupt_queue("a pending request was changed or destroyed");
    }
    head_ = r->next;
    if (head_ == nullptr) tail_ = nullptr;
    r->next = nullptr;
    return r;
  }
  /// Forgets every request without touching them (they may already be gone).
  void clear() noexcept { head_ = tail_ = nullptr; }
  /// Whether `r` is linked in this queue (walks it: for checks).
  bool contains(const Request& r) const noexcept {
    for (const Request* q = head_; q != nullptr; q = q->next)
      if (q == &r) return true;
    return false;
  }

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
  /// Completes `r` (reset, not posted) at once when the link can do so without queueing it:
  /// nothing of its kind is queued with this peer and it moves in one step. False: nothing
  /// moved, post it. Throws as progress() does.
  virtual bool complete_now(Request& /*r*/) { return false; }
  /// Before a normal close: delivers to the peer what completed sends left in flight (a
  /// transport whose sends complete before the peer has the data), until `deadline`.
  virtual void flush(Deadline /*deadline*/) noexcept {}
  /// Forgets every pending request: they are never touched again (the mesh is poisoned).
  virtual void drop() noexcept {
    sends_.clear();
    recvs_.clear();
  }
  /// Without blocking: when no receive is posted and the peer's next message has arrived (its
  /// header at least), sets `tag` to that message's tag and returns true. The message stays
  /// where it is, for the receive posted next. Throws as progress() does (a closed link).
  virtual bool peek(std::uint32_t& /*tag*/) { return false; }
  /// The file descriptors to poll() while blocked, and for what (tcp, ucx). True: events are
  /// pending already, progress again instead of sleeping.
  virtual bool add_poll_fds(std::vector<pollfd>& /*out*/) const { return false; }

  /// Moves every pending request, in order, to `to`, which takes them as if just posted: for
  /// requests that waited for their peer's connection and have not moved yet.
  void hand_over(Endpoint& to) {
    while (!sends_.empty()) to.post(*sends_.pop());
    while (!recvs_.empty()) to.post(*recvs_.pop());
  }

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

/// Makes the endpoint to `peer`; it reports a closed connection through `failures`.
using EndpointMaker = std::function<std::unique_ptr<Endpoint>(int peer, PeerFailureHandler&)>;

/// A mesh of `peers.size()` ranks over endpoints that `make_endpoint` makes for every peer but
/// `rank`, each peer watched through its control connection `controls[peer]` (BYE, ABORT,
/// end of file). The endpoints must be tcp links: shared memory needs the context that
/// connect_mesh() sets up. Tests drive the mesh's wait loop with scripted endpoints this way.
std::unique_ptr<Mesh> make_mesh(int rank, std::vector<PeerInfo> peers,
                                std::vector<net::Fd> controls, const EndpointMaker& make_endpoint,
                                const MeshOptions& options);

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
