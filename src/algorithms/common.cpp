#include "algorithms/common.hpp"

#include <algorithm>
#include <array>

namespace tandem::algorithms::detail {

std::vector<std::size_t> even_offsets(std::size_t count, int n) {
  std::vector<std::size_t> off(static_cast<std::size_t>(n) + 1);
  const std::size_t base = count / static_cast<std::size_t>(n);
  const std::size_t extra = count % static_cast<std::size_t>(n);
  for (std::size_t i = 0; i <= static_cast<std::size_t>(n); ++i)
    off[i] = i * base + std::min(i, extra);
  return off;
}

std::vector<std::size_t> prefix_offsets(std::span<const std::size_t> counts) {
  std::vector<std::size_t> off(counts.size() + 1);
  for (std::size_t i = 0; i < counts.size(); ++i) off[i + 1] = off[i] + counts[i];
  return off;
}

void abort_if_in_flight(transport::Mesh& mesh, std::span<const Request> requests) noexcept {
  const bool in_flight = std::any_of(requests.begin(), requests.end(),
                                     [](const Request& r) { return r.peer >= 0 && !r.complete; });
  if (in_flight && mesh.error() == nullptr)
    mesh.abort(Error(ErrorCode::Aborted, "a collective failed with requests still in flight"));
}

Batch::~Batch() {
  abort_if_in_flight(mesh_, std::span<const Request>(reqs_, capacity_));
}

void wait_all(transport::Mesh& mesh, std::initializer_list<Batch*> batches, Deadline deadline) {
  std::size_t total = 0;
  for (const Batch* b : batches) total += b->size();
  if (total == 0) return;
  // On the stack for small collectives (no allocation on their path).
  std::array<Request*, 16> few;
  std::vector<Request*> many(total > few.size() ? total : 0);
  Request** ps = many.empty() ? few.data() : many.data();
  std::size_t k = 0;
  for (const Batch* b : batches)
    for (std::size_t i = 0; i < b->capacity_; ++i)
      if (b->reqs_[i].peer >= 0) ps[k++] = &b->reqs_[i];
  mesh.wait(std::span<Request* const>(ps, k), deadline);
}

void sendrecv(transport::Mesh& mesh, Request& send, Request& recv, Deadline deadline) {
  // The send first: where the link moves it at once, the peer's message may have arrived
  // meanwhile and the receive completes without a wait.
  std::array<Request*, 2> both{&send, &recv};
  mesh.transfer(both, deadline);
}

void throw_size_mismatch(const Call& call, int peer, std::uint64_t mine, std::uint64_t theirs) {
  const char* what = call.kind == CollectiveKind::broadcast ? "buffer" : "input";
  TANDEM_THROW(ErrorCode::Mismatch,
               "{} with rank {}: this rank's {} is {} bytes, rank {}'s is {} bytes. The ranks "
               "are calling the collective with different sizes; nothing was copied into "
               "another rank's buffer",
               to_string(call.kind), peer, what, mine, peer, theirs);
}

std::size_t call_bytes(const Call& call) noexcept {
  switch (call.kind) {
    case CollectiveKind::broadcast:
    case CollectiveKind::scatter:
    case CollectiveKind::allgather:
    case CollectiveKind::allgatherv:
    case CollectiveKind::recv:
      return call.out.bytes();
    default:
      return call.in.bytes();
  }
}

std::optional<Pow2Fold> fold_to_pow2(const Call& call, transport::Mesh& mesh, const std::byte* in,
                                     std::byte* out, std::size_t count, DataType dt, ReduceOp op) {
  const int n = mesh.size();
  const int r = mesh.rank();
  Pow2Fold f;
  f.p = pow2_floor(n);
  f.extra = n - f.p;
  f.vr = r - f.extra;
  f.cur = in;
  if (r >= 2 * f.extra) return f;
  const std::size_t bytes = count * dtype_size(dt);
  if (r % 2 == 0) {
    Request s = Request::make_send(r + 1, call.tag, in, bytes);
    mesh.post(s);
    mesh.wait(s, call.deadline);
    Request q = Request::make_recv(r + 1, call.tag, out, bytes);
    mesh.post(q);
    mesh.wait(q, call.deadline);
    return std::nullopt;
  }
  Request q = Request::make_recv_reduce(r - 1, call.tag, out, in, count, dt, op);
  mesh.post(q);
  mesh.wait(q, call.deadline);
  f.cur = out;
  f.vr = r / 2;
  return f;
}

void unfold_from_pow2(const Call& call, transport::Mesh& mesh, const Pow2Fold& fold,
                      const std::byte* out, std::size_t bytes) {
  const int r = mesh.rank();
  if (r >= 2 * fold.extra) return;
  Request s = Request::make_send(r - 1, call.tag, out, bytes);
  mesh.post(s);
  mesh.wait(s, call.deadline);
}

}  // namespace tandem::algorithms::detail
