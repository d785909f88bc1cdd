// Ring reduce-scatter: in step s rank r passes its partial of block r-s-1 to its right
// neighbour and folds the partial of block r-s-2 arriving from the left into its own input,
// so block b is reduced in ring order starting at rank b+1 and ends, complete, on rank b.
// Blocks are cut into chunks: chunk k of a step is forwarded as soon as it is reduced, while
// later chunks are still arriving. Each incoming partial is combined with this rank's raw
// input only, so every receive can be posted up front.

#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"
#include "algorithms/parts.hpp"
#include "core/reduce.hpp"

namespace tandem::algorithms {
namespace detail {

void ring_reduce_scatter(const Call& call, Context& ctx, DataType dt, const std::byte* in,
                         std::byte* work, std::byte* mine, std::span<const std::size_t> off) {
  transport::Mesh& mesh = ctx.mesh;
  const int n = mesh.size();
  const int r = mesh.rank();
  const std::size_t es = dtype_size(dt);
  const auto size_of = [&](int b) { return off[b + 1] - off[b]; };
  if (n == 1) {
    copy_bytes(mine, in + off[0] * es, size_of(0) * es);
    return;
  }
  const std::size_t ce = chunk_elems(ctx, dt);
  const int left = mod(r - 1, n);
  const int right = mod(r + 1, n);
  const ReduceOp op = wire_op(call.op);
  const auto send_block = [&](int s) { return mod(r - s - 1, n); };
  const auto recv_block = [&](int s) { return mod(r - s - 2, n); };

  std::size_t nrecv = 0;
  std::size_t nsend = 0;
  for (int s = 0; s < n - 1; ++s) {
    nrecv += chunks_of(size_of(recv_block(s)), ce);
    nsend += chunks_of(size_of(send_block(s)), ce);
  }
  Batch recvs(mesh, nrecv);
  Batch sends(mesh, nsend);
  std::vector<std::size_t> first_recv(static_cast<std::size_t>(n));
  for (int s = 0; s < n - 1; ++s) {
    const int b = recv_block(s);
    first_recv[static_cast<std::size_t>(s)] = recvs.size();
    const bool last = s == n - 2;  // block r itself: the result goes to `mine`
    for (std::size_t e = 0; e < size_of(b); e += ce) {
      const std::size_t m = std::min(ce, size_of(b) - e);
      std::byte* dst = last ? mine + e * es : work + (off[b] + e) * es;
      recvs.post(Request::make_recv_reduce(left, call.tag, dst, in + (off[b] + e) * es, m, dt, op));
    }
  }
  for (int s = 0; s < n - 1; ++s) {
    const int b = send_block(s);
    std::size_t k = 0;
    for (std::size_t e = 0; e < size_of(b); e += ce, ++k) {
      const std::size_t m = std::min(ce, size_of(b) - e);
      const std::byte* src = in + (off[b] + e) * es;
      if (s > 0) {
        // Block b was the one received (and reduced) in step s-1, chunked the same way.
        mesh.wait(recvs[first_recv[static_cast<std::size_t>(s - 1)] + k], call.deadline);
        src = work + (off[b] + e) * es;
      }
      sends.post(Request::make_send(right, call.tag, src, m * es));
    }
  }
  wait_all(mesh, {&recvs, &sends}, call.deadline);
}

}  // namespace detail

namespace {

class Ring final : public Algorithm {
 public:
  Ring() : Algorithm(CollectiveKind::reduce_scatter, "ring") {}

  void run(const Call& call, Context& ctx) const override {
    const int n = ctx.mesh.size();
    const DataType dt = call.out.dtype;
    const std::size_t c = call.out.count;
    const auto off = detail::even_offsets(c * static_cast<std::size_t>(n), n);
    // Partials of the other blocks never touch the caller's input.
    std::byte* work =
        n > 1 ? ctx.scratch.get(c * static_cast<std::size_t>(n) * dtype_size(dt)) : nullptr;
    detail::ring_reduce_scatter(call, ctx, dt, detail::ptr(call.in.data), work,
                                detail::ptr(call.out.data), off);
    if (call.op == ReduceOp::avg && n > 1) core::divide(call.out.data, c, dt, n);
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_reduce_scatter_ring() {
  return std::make_unique<Ring>();
}

}  // namespace tandem::algorithms
