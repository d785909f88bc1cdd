// Binomial-tree reduce: each rank folds in its children's subtrees, smallest first, then
// passes the result to its parent; log2(n) rounds. Chunk-pipelined: chunk k goes up as soon
// as every child's chunk k is in. A chunk reduces its children one after the other (they
// write the same bytes), while the first child's chunks, which combine with the raw input,
// are all posted up front.

#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"
#include "algorithms/parts.hpp"
#include "core/reduce.hpp"

namespace tandem::algorithms {
namespace detail {

void tree_reduce(const Call& call, Context& ctx, DataType dt, const std::byte* in, std::byte* work,
                 std::size_t count, int root) {
  transport::Mesh& mesh = ctx.mesh;
  const int n = mesh.size();
  const int r = mesh.rank();
  const std::size_t es = dtype_size(dt);
  if (n == 1) {
    copy_bytes(work, in, count * es);
    return;
  }
  if (count == 0) return;
  const int vr = mod(r - root, n);
  const BinomialNode node = binomial_node(vr, n);
  const auto real = [&](int v) { return mod(v + root, n); };
  const std::size_t ce = chunk_elems(ctx, dt);
  const std::size_t nk = chunks_of(count, ce);
  const ReduceOp op = wire_op(call.op);
  const auto nc = static_cast<std::size_t>(node.nchildren);

  Batch sends(mesh, node.parent >= 0 ? nk : 0);
  if (nc == 0) {  // a leaf sends its input as it is
    for (std::size_t k = 0; k < nk; ++k) {
      const std::size_t e = k * ce;
      sends.post(Request::make_send(real(node.parent), call.tag, in + e * es,
                                    std::min(ce, count - e) * es));
    }
    wait_all(mesh, {&sends}, call.deadline);
    return;
  }
  Batch recvs(mesh, nk * nc);  // slot k * nc + j: chunk k from child j
  const auto post_recv = [&](std::size_t k, std::size_t j) {
    const std::size_t e = k * ce;
    const std::byte* local = j == 0 ? in + e * es : work + e * es;
    recvs.post_at(k * nc + j,
                  Request::make_recv_reduce(real(node.children[j]), call.tag, work + e * es, local,
                                            std::min(ce, count - e), dt, op));
  };
  for (std::size_t k = 0; k < nk; ++k) post_recv(k, 0);
  for (std::size_t k = 0; k < nk; ++k) {
    for (std::size_t j = 0; j < nc; ++j) {
      recvs.wait(k * nc + j, call.deadline);
      if (j + 1 < nc) post_recv(k, j + 1);
    }
    if (node.parent >= 0) {
      const std::size_t e = k * ce;
      sends.post(Request::make_send(real(node.parent), call.tag, work + e * es,
                                    std::min(ce, count - e) * es));
    }
  }
  wait_all(mesh, {&sends}, call.deadline);
}

}  // namespace detail

namespace {

class Tree final : public Algorithm {
 public:
  Tree() : Algorithm(CollectiveKind::reduce, "tree") {}

  void run(const Call& call, Context& ctx) const override {
    const int n = ctx.mesh.size();
    const int r = ctx.mesh.rank();
    const DataType dt = call.in.dtype;
    const std::size_t c = call.in.count;
    const int vr = detail::mod(r - call.root, n);
    const bool has_children = (vr & 1) == 0 && vr + 1 < n;
    std::byte* work = nullptr;
    if (r == call.root) {
      work = detail::ptr(call.out.data);
    } else if (has_children) {
      work = ctx.scratch.get(c * dtype_size(dt));  // partials; `out` stays untouched here
    }
    detail::tree_reduce(call, ctx, dt, detail::ptr(call.in.data), work, c, call.root);
    if (r == call.root && call.op == ReduceOp::avg && n > 1) core::divide(work, c, dt, n);
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_reduce_tree() {
  return std::make_unique<Tree>();
}

}  // namespace tandem::algorithms
