// Reduce for large messages = ring reduce-scatter, then every rank sends its reduced block
// to the root (linear gather). Each rank moves about 2(n-1)/n of the message instead of the
// whole message per tree level.

#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"
#include "algorithms/parts.hpp"
#include "core/reduce.hpp"

namespace tandem::algorithms {
namespace {

class Ring final : public Algorithm {
 public:
  Ring() : Algorithm(CollectiveKind::reduce, "ring") {}

  void run(const Call& call, Context& ctx) const override {
    const int n = ctx.mesh.size();
    const auto r = static_cast<std::size_t>(ctx.mesh.rank());
    const bool is_root = ctx.mesh.rank() == call.root;
    const DataType dt = call.in.dtype;
    const std::size_t es = dtype_size(dt);
    const std::size_t c = call.in.count;
    const auto off = detail::even_offsets(c, n);
    // The root builds the result in place in `out`; the others keep their partials in scratch
    // (their `out` is not touched).
    std::byte* work = is_root ? detail::ptr(call.out.data) : ctx.scratch.get(c * es);
    std::byte* mine = work + off[r] * es;
    detail::ring_reduce_scatter(call, ctx, dt, detail::ptr(call.in.data), work, mine, off);
    if (call.op == ReduceOp::avg && n > 1) core::divide(mine, off[r + 1] - off[r], dt, n);
    detail::linear_gather(call, ctx, dt, mine, work, off, call.root);
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_reduce_ring() {
  return std::make_unique<Ring>();
}

}  // namespace tandem::algorithms
