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
  const std::size_t es = dtype_size(dt);
  RingSteps ring(ctx, dt, off, 1);
  if (ring.n == 1) {
    copy_bytes(mine, in + off[0] * es, ring.size_of(0) * es);
    return;
  }
  const ReduceOp op = wire_op(call.op);
  Batch recvs(mesh, ring.recv_chunks());
  Batch sends(mesh, ring.send_chunks());
  ring.post_receives(recvs, [&](int s, int b, std::size_t e, std::size_t m) {
    const bool last = s == ring.n - 2;  // block r itself: the result goes to `mine`
    std::byte* dst = last ? mine + e * es : work + (off[b] + e) * es;
    return Request::make_recv_reduce(ring.left, call.tag, dst, in + (off[b] + e) * es, m, dt, op);
  });
  for (int s = 0; s < ring.n - 1; ++s) {
    const int b = ring.send_block(s);
    std::size_t k = 0;
    for (std::size_t e = 0; e < ring.size_of(b); e += ring.ce, ++k) {
      const std::size_t m = std::min(ring.ce, ring.size_of(b) - e);
      const std::byte* src = in + (off[b] + e) * es;
      if (s > 0) {
        // Block b was the one received (and reduced) in step s-1, chunked the same way.
        ring.wait_received(recvs, s - 1, k, call.deadline);
        src = work + (off[b] + e) * es;
      }
      sends.post(Request::make_send(ring.right, call.tag, src, m * es));
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
