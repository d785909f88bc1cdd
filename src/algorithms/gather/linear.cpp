// Linear gather: the root posts a receive from every rank at once, straight into place.

#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"
#include "algorithms/parts.hpp"

namespace tandem::algorithms {
namespace detail {

void linear_gather(const Call& call, Context& ctx, DataType dt, const std::byte* mine,
                   std::byte* out, std::span<const std::size_t> off, int root) {
  transport::Mesh& mesh = ctx.mesh;
  const int n = mesh.size();
  const int r = mesh.rank();
  const std::size_t es = dtype_size(dt);
  const auto size_of = [&](int b) { return off[b + 1] - off[b]; };
  if (r != root) {
    if (size_of(r) == 0) return;
    Request s = Request::make_send(root, call.tag, mine, size_of(r) * es);
    mesh.post(s);
    mesh.wait(s, call.deadline);
    return;
  }
  Batch recvs(mesh, static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    if (i == r || size_of(i) == 0) continue;
    recvs.post(Request::make_recv(i, call.tag, out + off[i] * es, size_of(i) * es));
  }
  copy_bytes(out + off[r] * es, mine, size_of(r) * es);
  wait_all(mesh, {&recvs}, call.deadline);
}

}  // namespace detail

namespace {

class Linear final : public Algorithm {
 public:
  Linear() : Algorithm(CollectiveKind::gather, "linear") {}

  void run(const Call& call, Context& ctx) const override {
    const int n = ctx.mesh.size();
    const std::size_t c = call.in.count;
    std::vector<std::size_t> off(static_cast<std::size_t>(n) + 1);
    for (std::size_t i = 0; i < off.size(); ++i) off[i] = i * c;
    detail::linear_gather(call, ctx, call.in.dtype, detail::ptr(call.in.data),
                          detail::ptr(call.out.data), off, call.root);
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_gather_linear() {
  return std::make_unique<Linear>();
}

}  // namespace tandem::algorithms
