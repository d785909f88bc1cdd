// Dissemination barrier: in round k every rank signals rank r + 2^k and waits for rank
// r - 2^k with an empty message; after ceil(log2 n) rounds every rank has (transitively)
// heard from every other.

#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"

namespace tandem::algorithms {
namespace {

class Dissemination final : public Algorithm {
 public:
  Dissemination() : Algorithm(CollectiveKind::barrier, "dissemination") {}

  void run(const Call& call, Context& ctx) const override {
    using transport::Request;
    transport::Mesh& mesh = ctx.mesh;
    const int n = mesh.size();
    const int r = mesh.rank();
    for (int d = 1; d < n; d <<= 1) {
      Request s = Request::make_send(detail::mod(r + d, n), call.tag, nullptr, 0);
      Request q = Request::make_recv(detail::mod(r - d, n), call.tag, nullptr, 0);
      detail::sendrecv(mesh, s, q, call.deadline);
    }
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_barrier_dissemination() {
  return std::make_unique<Dissemination>();
}

}  // namespace tandem::algorithms
