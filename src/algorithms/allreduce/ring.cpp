// Ring allreduce = ring reduce-scatter then ring allgather over the same blocks of `out`
// (bandwidth-optimal: each rank sends and receives 2(n-1)/n of the message). Each block is
// reduced by one rank only and then copied, so every rank ends with the same bits.
//
// Between ranks on shared memory the message runs in segments (Context::segment_bytes per
// rank), each reduce-scattered and allgathered before the next: a rank overwrites the blocks
// it sent a moment earlier, still in its cache, instead of the whole message's worth later
// (docs/benchmarks-large.md#allreduce). Over TCP each segment would add a round trip: one segment
// there.

#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"
#include "algorithms/parts.hpp"
#include "core/reduce.hpp"

#include <algorithm>

namespace tandem::algorithms {
namespace {

class Ring final : public Algorithm {
 public:
  Ring() : Algorithm(CollectiveKind::allreduce, "ring") {}

  void run(const Call& call, Context& ctx) const override {
    const transport::Mesh& mesh = ctx.mesh;
    const int n = mesh.size();
    const int r = mesh.rank();
    const DataType dt = call.out.dtype;
    const std::size_t es = dtype_size(dt);
    const std::size_t total = call.out.count;
    std::size_t seg = total;
    if (n > 1 && ctx.segment_bytes != 0 &&
        mesh.link(detail::mod(r - 1, n)) == transport::Link::shm &&
        mesh.link(detail::mod(r + 1, n)) == transport::Link::shm)
      seg = std::max<std::size_t>(ctx.segment_bytes / es, 1) * static_cast<std::size_t>(n);
    std::size_t first = 0;
    do {
      const std::size_t count = std::min(seg, total - first);
      const auto off = detail::even_offsets(count, n);
      const std::byte* in = detail::ptr(call.in.data) + first * es;
      std::byte* out = detail::ptr(call.out.data) + first * es;
      std::byte* mine = out + off[static_cast<std::size_t>(r)] * es;
      detail::ring_reduce_scatter(call, ctx, dt, in, out, mine, off);
      if (call.op == ReduceOp::avg && n > 1)
        core::divide(mine, off[static_cast<std::size_t>(r) + 1] - off[static_cast<std::size_t>(r)],
                     dt, n);
      detail::ring_allgather(call, ctx, dt, mine, out, off);
      first += count;
    } while (first < total);
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_allreduce_ring() {
  return std::make_unique<Ring>();
}

}  // namespace tandem::algorithms
