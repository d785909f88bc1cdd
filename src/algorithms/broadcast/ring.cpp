// Pipelined chain broadcast: chunks flow root -> root+1 -> ... -> root-1, each rank
// forwarding chunk k as soon as it has arrived. Every link carries the message once, so for
// large messages the time approaches one message transfer plus (n-2) chunk transfers.

#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"

#include <cstring>

namespace tandem::algorithms {
namespace {

class Ring final : public Algorithm {
 public:
  Ring() : Algorithm(CollectiveKind::broadcast, "ring") {}

  void run(const Call& call, Context& ctx) const override {
    using detail::Batch;
    using transport::Request;
    transport::Mesh& mesh = ctx.mesh;
    const int n = mesh.size();
    const int r = mesh.rank();
    const DataType dt = call.out.dtype;
    const std::size_t es = dtype_size(dt);
    const std::size_t count = call.out.count;
    std::byte* out = detail::ptr(call.out.data);
    const std::byte* src = detail::ptr(call.in.data);
    if (r == call.root && n == 1) detail::copy_bytes(out, src, count * es);
    if (n == 1 || count == 0) return;
    const int vr = detail::mod(r - call.root, n);
    const int prev = detail::mod(r - 1, n);
    const int next = vr + 1 < n ? detail::mod(r + 1, n) : -1;
    const std::size_t ce = detail::chunk_elems(ctx, dt);
    const std::size_t nk = detail::chunks_of(count, ce);

    Batch recvs(mesh, vr > 0 ? nk : 0);
    Batch sends(mesh, next >= 0 ? nk : 0);
    if (vr > 0) {
      for (std::size_t e = 0; e < count; e += ce)
        recvs.post(Request::make_recv(prev, call.tag, out + e * es, std::min(ce, count - e) * es));
    }
    // Out of place, the root copies each chunk into `out` and sends it from there while it
    // is still in the cache: the source is read from memory once, not twice
    // (docs/benchmarks-large.md).
    const bool tee = vr == 0 && out != src;
    if (next >= 0) {
      std::size_t k = 0;
      for (std::size_t e = 0; e < count; e += ce, ++k) {
        const std::size_t m = std::min(ce, count - e);
        if (vr > 0) recvs.wait(k, call.deadline);
        if (tee) std::memcpy(out + e * es, src + e * es, m * es);
        sends.post(Request::make_send(next, call.tag, out + e * es, m * es));
        if (tee) detail::progress(mesh);
      }
    }
    detail::wait_all(mesh, {&recvs, &sends}, call.deadline);
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_broadcast_ring() {
  return std::make_unique<Ring>();
}

}  // namespace tandem::algorithms
