// Ring allgather: in step s rank r forwards block r-s to its right neighbour and receives
// block r-s-1 from its left one. Blocks are cut into chunks and chunk k is forwarded as soon
// as it has arrived; every receive lands in its final place, so all are posted up front.

#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"
#include "algorithms/parts.hpp"

#include <cstring>

namespace tandem::algorithms {
namespace detail {

void ring_allgather(const Call& call, Context& ctx, DataType dt, const std::byte* mine,
                    std::byte* out, std::span<const std::size_t> off) {
  transport::Mesh& mesh = ctx.mesh;
  const std::size_t es = dtype_size(dt);
  RingSteps ring(ctx, dt, off, 0);
  if (ring.n == 1) {
    copy_bytes(out + off[0] * es, mine, ring.size_of(0) * es);
    return;
  }
  Batch recvs(mesh, ring.recv_chunks());
  Batch sends(mesh, ring.send_chunks());
  ring.post_receives(recvs, [&](int, int b, std::size_t e, std::size_t m) {
    return Request::make_recv(ring.left, call.tag, out + (off[b] + e) * es, m * es);
  });
  // Out of place, the first step copies each chunk of this rank's block into its place in
  // `out` and sends it from there, while it is still in the cache: the block is read from
  // memory once, not twice (docs/benchmarks-large.md).
  std::byte* const own = out + off[ring.r] * es;
  const bool tee = own != mine;
  for (int s = 0; s < ring.n - 1; ++s) {
    const int b = ring.send_block(s);
    std::size_t k = 0;
    for (std::size_t e = 0; e < ring.size_of(b); e += ring.ce, ++k) {
      const std::size_t m = std::min(ring.ce, ring.size_of(b) - e);
      const std::byte* src = mine + e * es;
      if (s == 0 && tee) {
        std::memcpy(own + e * es, src, m * es);
        src = own + e * es;
      }
      if (s > 0) {
        ring.wait_received(recvs, s - 1, k, call.deadline);
        src = out + (off[b] + e) * es;
      }
      sends.post(Request::make_send(ring.right, call.tag, src, m * es));
      if (s == 0 && tee) progress(mesh);
    }
  }
  wait_all(mesh, {&recvs, &sends}, call.deadline);
}

}  // namespace detail

namespace {

class Ring final : public Algorithm {
 public:
  Ring() : Algorithm(CollectiveKind::allgather, "ring") {}

  void run(const Call& call, Context& ctx) const override {
    const int n = ctx.mesh.size();
    const std::size_t c = call.in.count;
    std::vector<std::size_t> off(static_cast<std::size_t>(n) + 1);
    for (std::size_t i = 0; i < off.size(); ++i) off[i] = i * c;
    detail::ring_allgather(call, ctx, call.in.dtype, detail::ptr(call.in.data),
                           detail::ptr(call.out.data), off);
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_allgather_ring() {
  return std::make_unique<Ring>();
}

}  // namespace tandem::algorithms
