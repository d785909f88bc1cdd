// Bruck allgather (any world size): ceil(log2 n) steps. Blocks are gathered in rotated
// order (slot i holds rank r+i) in scratch: in the step of distance d a rank sends its first
// min(d, n-d) slots to rank r-d and appends those of rank r+d; one rotation at the end
// puts them in place.

#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"

namespace tandem::algorithms {
namespace {

class Bruck final : public Algorithm {
 public:
  Bruck() : Algorithm(CollectiveKind::allgather, "bruck") {}

  void run(const Call& call, Context& ctx) const override {
    using transport::Request;
    transport::Mesh& mesh = ctx.mesh;
    const int n = mesh.size();
    const auto r = static_cast<std::size_t>(mesh.rank());
    const std::size_t block = call.in.bytes();
    const auto nn = static_cast<std::size_t>(n);
    std::byte* out = detail::ptr(call.out.data);
    if (n == 1 || block == 0) {
      detail::copy_bytes(out + r * block, call.in.data, block);
      return;
    }
    std::byte* tmp = ctx.scratch.get(nn * block);
    detail::copy_bytes(tmp, call.in.data, block);
    for (int d = 1; d < n; d <<= 1) {
      const auto cnt = static_cast<std::size_t>(std::min(d, n - d));
      Request s = Request::make_send(detail::mod(mesh.rank() - d, n), call.tag, tmp, cnt * block);
      Request q = Request::make_recv(detail::mod(mesh.rank() + d, n), call.tag,
                                     tmp + static_cast<std::size_t>(d) * block, cnt * block);
      detail::sendrecv(mesh, s, q, call.deadline);
    }
    // Slot i holds rank (r + i) % n.
    detail::copy_bytes(out + r * block, tmp, (nn - r) * block);
    detail::copy_bytes(out, tmp + (nn - r) * block, r * block);
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_allgather_bruck() {
  return std::make_unique<Bruck>();
}

}  // namespace tandem::algorithms
