// Binomial-tree broadcast: log2(n) rounds; each rank forwards to its largest subtree first.
// Chunk-pipelined: chunk k is forwarded as soon as it has arrived.

#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"
#include "algorithms/parts.hpp"

namespace tandem::algorithms {
namespace detail {

namespace {

// The tree itself, in a frame of its own: the two-rank path below does not pay for its
// prologue.
[[gnu::noinline]] void binomial_broadcast(const Call& call, Context& ctx, DataType dt,
                                          const std::byte* src, std::byte* out, std::size_t count,
                                          int root) {
  transport::Mesh& mesh = ctx.mesh;
  const int n = mesh.size();
  const int r = mesh.rank();
  const std::size_t es = dtype_size(dt);
  const int vr = mod(r - root, n);
  const BinomialNode node = binomial_node(vr, n);
  const auto real = [&](int v) { return mod(v + root, n); };
  const std::size_t ce = chunk_elems(ctx, dt);
  const std::size_t nk = chunks_of(count, ce);
  const auto nc = static_cast<std::size_t>(node.nchildren);

  Batch recvs(mesh, node.parent >= 0 ? nk : 0);
  Batch sends(mesh, nk * nc);
  const std::byte* from = r == root ? src : out;
  if (node.parent >= 0) {
    for (std::size_t k = 0; k < nk; ++k) {
      const std::size_t e = k * ce;
      recvs.post(Request::make_recv(real(node.parent), call.tag, out + e * es,
                                    std::min(ce, count - e) * es));
    }
  }
  for (std::size_t k = 0; k < nk; ++k) {
    const std::size_t e = k * ce;
    if (node.parent >= 0 && nc > 0) recvs.wait(k, call.deadline);
    for (std::size_t j = nc; j-- > 0;) {
      sends.post(Request::make_send(real(node.children[j]), call.tag, from + e * es,
                                    std::min(ce, count - e) * es));
    }
  }
  if (r == root) copy_bytes(out, src, count * es);
  wait_all(mesh, {&recvs, &sends}, call.deadline);
}

}  // namespace

void tree_broadcast(const Call& call, Context& ctx, DataType dt, const std::byte* src,
                    std::byte* out, std::size_t count, int root) {
  transport::Mesh& mesh = ctx.mesh;
  const int n = mesh.size();
  const int r = mesh.rank();
  const std::size_t bytes = count * dtype_size(dt);
  if (r == root && n == 1) copy_bytes(out, src, bytes);
  if (n == 1 || count == 0) return;
  if (n != 2 || count > chunk_elems(ctx, dt)) {
    binomial_broadcast(call, ctx, dt, src, out, count, root);
    return;
  }
  // Two ranks, one chunk: one request (the context's, reused), no tree, moved at once where the
  // link can (a small broadcast's path). The root's own copy follows the send.
  const bool sends = r == root;
  Request& q = ctx.single;  // transfer() resets its transport fields
  q.kind = sends ? transport::RequestKind::send : transport::RequestKind::recv;
  q.peer = 1 - r;
  q.tag = call.tag;
  q.src = sends ? src : nullptr;
  q.dst = sends ? nullptr : out;
  q.bytes = bytes;
  mesh.transfer(q, call.deadline);
  if (sends) copy_bytes(out, src, bytes);
}

}  // namespace detail

namespace {

class Tree final : public Algorithm {
 public:
  Tree() : Algorithm(CollectiveKind::broadcast, "tree") {}

  void run(const Call& call, Context& ctx) const override {
    detail::tree_broadcast(call, ctx, call.out.dtype, detail::ptr(call.in.data),
                           detail::ptr(call.out.data), call.out.count, call.root);
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_broadcast_tree() {
  return std::make_unique<Tree>();
}

}  // namespace tandem::algorithms
