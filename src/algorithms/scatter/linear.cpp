// Linear scatter: the root posts a send to every rank at once.

#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"

namespace tandem::algorithms {
namespace {

class Linear final : public Algorithm {
 public:
  Linear() : Algorithm(CollectiveKind::scatter, "linear") {}

  void run(const Call& call, Context& ctx) const override {
    using transport::Request;
    transport::Mesh& mesh = ctx.mesh;
    const int n = mesh.size();
    const int r = mesh.rank();
    const std::size_t bytes = call.out.bytes();
    if (bytes == 0) return;
    if (r != call.root) {
      Request q = Request::make_recv(call.root, call.tag, call.out.data, bytes);
      mesh.post(q);
      mesh.wait(q, call.deadline);
      return;
    }
    const std::byte* in = detail::ptr(call.in.data);
    detail::Batch sends(mesh, static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      if (i != r)
        sends.post(
            Request::make_send(i, call.tag, in + static_cast<std::size_t>(i) * bytes, bytes));
    }
    detail::copy_bytes(call.out.data, in + static_cast<std::size_t>(r) * bytes, bytes);
    detail::wait_all(mesh, {&sends}, call.deadline);
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_scatter_linear() {
  return std::make_unique<Linear>();
}

}  // namespace tandem::algorithms
