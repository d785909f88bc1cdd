// Binomial-tree gather for small blocks: each rank collects its subtree's blocks (relative
// ranks vr .. vr+size-1, contiguous) and passes them up in one message; log2(n) rounds
// instead of n-1 messages into the root. The root rotates relative order into rank order.

#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"

namespace tandem::algorithms {
namespace {

class Binomial final : public Algorithm {
 public:
  Binomial() : Algorithm(CollectiveKind::gather, "binomial") {}

  void run(const Call& call, Context& ctx) const override {
    using transport::Request;
    transport::Mesh& mesh = ctx.mesh;
    const int n = mesh.size();
    const int r = mesh.rank();
    const std::size_t block = call.in.bytes();
    const auto root = static_cast<std::size_t>(call.root);
    const auto nn = static_cast<std::size_t>(n);
    std::byte* out = detail::ptr(call.out.data);
    if (n == 1) detail::copy_bytes(out, call.in.data, block);
    if (n == 1 || block == 0) return;
    const int vr = detail::mod(r - call.root, n);
    const detail::BinomialNode node = detail::binomial_node(vr, n);
    const auto real = [&](int v) { return detail::mod(v + call.root, n); };
    if (node.nchildren == 0) {
      Request s = Request::make_send(real(node.parent), call.tag, call.in.data, block);
      mesh.post(s);
      mesh.wait(s, call.deadline);
      return;
    }
    // Relative order: slot j holds relative rank vr + j. On root 0 that is rank order.
    std::byte* tmp =
        vr == 0 && root == 0 ? out : ctx.scratch.get(static_cast<std::size_t>(node.size) * block);
    detail::Batch recvs(mesh, static_cast<std::size_t>(node.nchildren));
    for (int j = 0; j < node.nchildren; ++j) {
      const auto ju = static_cast<std::size_t>(j);
      recvs.post(Request::make_recv(real(node.children[ju]), call.tag,
                                    tmp + static_cast<std::size_t>(node.children[ju] - vr) * block,
                                    static_cast<std::size_t>(node.subtree[ju]) * block));
    }
    detail::copy_bytes(tmp, call.in.data, block);
    detail::wait_all(mesh, {&recvs}, call.deadline);
    if (vr != 0) {
      Request s = Request::make_send(real(node.parent), call.tag, tmp,
                                     static_cast<std::size_t>(node.size) * block);
      mesh.post(s);
      mesh.wait(s, call.deadline);
    } else if (tmp != out) {
      detail::copy_bytes(out + root * block, tmp, (nn - root) * block);
      detail::copy_bytes(out, tmp + (nn - root) * block, root * block);
    }
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_gather_binomial() {
  return std::make_unique<Binomial>();
}

}  // namespace tandem::algorithms
