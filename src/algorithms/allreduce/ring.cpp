// Ring allreduce = ring reduce-scatter then ring allgather over the same blocks of `out`
// (bandwidth-optimal: each rank sends and receives 2(n-1)/n of the message). Each block is
// reduced by one rank only and then copied, so every rank ends with the same bits.

#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"
#include "algorithms/parts.hpp"
#include "core/reduce.hpp"

namespace tandem::algorithms {
namespace {

class Ring final : public Algorithm {
 public:
  Ring() : Algorithm(CollectiveKind::allreduce, "ring") {}

  void run(const Call& call, Context& ctx) const override {
    const int n = ctx.mesh.size();
    const int r = ctx.mesh.rank();
    const DataType dt = call.out.dtype;
    const std::size_t es = dtype_size(dt);
    const auto off = detail::even_offsets(call.out.count, n);
    std::byte* out = detail::ptr(call.out.data);
    std::byte* mine = out + off[static_cast<std::size_t>(r)] * es;
    detail::ring_reduce_scatter(call, ctx, dt, detail::ptr(call.in.data), out, mine, off);
    if (call.op == ReduceOp::avg && n > 1)
      core::divide(mine, off[static_cast<std::size_t>(r) + 1] - off[static_cast<std::size_t>(r)],
                   dt, n);
    detail::ring_allgather(call, ctx, dt, mine, out, off);
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_allreduce_ring() {
  return std::make_unique<Ring>();
}

}  // namespace tandem::algorithms
