#include "transport/endpoint.hpp"

#include <tandem/error.hpp>

#include <cstring>

namespace tandem::transport {

std::string errno_text(int err) {
  char buf[256];
  return ::strerror_r(err, buf, sizeof buf);  // the GNU variant: returns the message
}

std::string_view to_string(RequestKind k) noexcept {
  switch (k) {
    case RequestKind::send:
      return "send";
    case RequestKind::recv:
      return "recv";
    case RequestKind::recv_reduce:
      return "recv_reduce";
  }
  return "?";
}

void Mesh::transfer(std::span<Request* const> rs, Deadline deadline) {
  std::size_t posted = 0;
  try {
    for (Request* r : rs) {
      post(*r);
      ++posted;
    }
  } catch (const Error& e) {
    if (posted != 0) abort(e);  // none may stay pending
    throw;
  }
  wait(rs, deadline);
}

int Mesh::probe(std::uint32_t /*tag*/, int /*from*/) {
  TANDEM_THROW(ErrorCode::Internal,
               "this mesh cannot look for a message from any peer (a receive from any rank runs "
               "on the communicator's own mesh)");
}

std::string_view to_string(Link l) noexcept {
  switch (l) {
    case Link::self:
      return "self";
    case Link::shm:
      return "shm";
    case Link::tcp:
      return "tcp";
    case Link::ucx:
      return "ucx";
  }
  return "?";
}

void throw_mismatch(const Request& r, Link link, std::uint32_t tag, std::uint64_t bytes) {
  TANDEM_THROW(ErrorCode::Mismatch,
               "message mismatch with rank {} ({}): this rank posted a {} of {} bytes with tag "
               "{:#010x}, rank {} sent {} bytes with tag {:#010x}. The ranks are calling "
               "different collectives, or the same one with different sizes, dtypes or roots",
               r.peer, to_string(link), to_string(r.kind), r.bytes, r.tag, r.peer, bytes, tag);
}

void PeerFailureHandler::throw_unraised(int peer) {
  TANDEM_THROW(ErrorCode::Internal, "the connection to rank {} closed and no error was raised",
               peer);
}

void throw_corrupt_queue(std::string_view what) {
  TANDEM_THROW(ErrorCode::Internal,
               "a transport request queue is corrupt: {}. A posted request must stay where it "
               "is, unchanged, until it completes or the mesh is aborted; please report this",
               what);
}

void throw_protocol(int peer, Link link, std::string_view what) {
  TANDEM_THROW(ErrorCode::Internal,
               "protocol violation by rank {} ({}): {}. Every rank must run the same tandem "
               "build; if they do, please report this",
               peer, to_string(link), what);
}

}  // namespace tandem::transport
