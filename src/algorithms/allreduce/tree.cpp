// Tree allreduce = binomial-tree reduce to rank 0, then binomial-tree broadcast from it,
// both chunk-pipelined. Rank 0 alone computes the result, so every rank gets the same bits.

#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"
#include "algorithms/parts.hpp"
#include "core/reduce.hpp"

namespace tandem::algorithms {
namespace {

class Tree final : public Algorithm {
 public:
  Tree() : Algorithm(CollectiveKind::allreduce, "tree") {}

  void run(const Call& call, Context& ctx) const override {
    const int n = ctx.mesh.size();
    const DataType dt = call.out.dtype;
    const std::size_t c = call.out.count;
    std::byte* out = detail::ptr(call.out.data);
    detail::tree_reduce(call, ctx, dt, detail::ptr(call.in.data), out, c, 0);
    if (ctx.mesh.rank() == 0 && call.op == ReduceOp::avg && n > 1) core::divide(out, c, dt, n);
    detail::tree_broadcast(call, ctx, dt, out, out, c, 0);
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_allreduce_tree() {
  return std::make_unique<Tree>();
}

}  // namespace tandem::algorithms
