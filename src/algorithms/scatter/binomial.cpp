// Binomial-tree scatter for small blocks: the root hands each child the blocks of its whole
// subtree in one message (largest subtree first), and so on down; log2(n) rounds.

#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"

namespace tandem::algorithms {
namespace {

class Binomial final : public Algorithm {
 public:
  Binomial() : Algorithm(CollectiveKind::scatter, "binomial") {}

  void run(const Call& call, Context& ctx) const override {
    using transport::Request;
    transport::Mesh& mesh = ctx.mesh;
    const int n = mesh.size();
    const std::size_t block = call.out.bytes();
    const auto root = static_cast<std::size_t>(call.root);
    const auto nn = static_cast<std::size_t>(n);
    const std::byte* in = detail::ptr(call.in.data);
    if (n == 1) detail::copy_bytes(call.out.data, in, block);
    if (n == 1 || block == 0) return;
    const int vr = detail::mod(mesh.rank() - call.root, n);
    const detail::BinomialNode node = detail::binomial_node(vr, n);
    const auto real = [&](int v) { return detail::mod(v + call.root, n); };
    if (node.nchildren == 0) {
      Request q = Request::make_recv(real(node.parent), call.tag, call.out.data, block);
      mesh.post(q);
      mesh.wait(q, call.deadline);
      return;
    }
    // Relative order: slot j holds the block of relative rank vr + j.
    const std::byte* tmp = in;
    if (vr != 0 || root != 0) {
      std::byte* buf = ctx.scratch.get(static_cast<std::size_t>(node.size) * block);
      if (vr == 0) {
        detail::copy_bytes(buf, in + root * block, (nn - root) * block);
        detail::copy_bytes(buf + (nn - root) * block, in, root * block);
      } else {
        Request q = Request::make_recv(real(node.parent), call.tag, buf,
                                       static_cast<std::size_t>(node.size) * block);
        mesh.post(q);
        mesh.wait(q, call.deadline);
      }
      tmp = buf;
    }
    detail::Batch sends(mesh, static_cast<std::size_t>(node.nchildren));
    for (int j = node.nchildren; j-- > 0;) {
      const auto ju = static_cast<std::size_t>(j);
      sends.post(Request::make_send(real(node.children[ju]), call.tag,
                                    tmp + static_cast<std::size_t>(node.children[ju] - vr) * block,
                                    static_cast<std::size_t>(node.subtree[ju]) * block));
    }
    detail::copy_bytes(call.out.data, tmp, block);
    detail::wait_all(mesh, {&sends}, call.deadline);
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_scatter_binomial() {
  return std::make_unique<Binomial>();
}

}  // namespace tandem::algorithms
