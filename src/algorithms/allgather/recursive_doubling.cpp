// Recursive-doubling allgather (power-of-two worlds): in step k each rank swaps the aligned
// group of 2^k blocks it holds with the rank 2^k away; log2(n) steps, blocks land in place.

#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"

namespace tandem::algorithms {
namespace {

class RecursiveDoubling final : public Algorithm {
 public:
  RecursiveDoubling() : Algorithm(CollectiveKind::allgather, "recursive_doubling") {}
  bool supports(const Call&, int world) const noexcept override { return detail::is_pow2(world); }

  void run(const Call& call, Context& ctx) const override {
    using transport::Request;
    transport::Mesh& mesh = ctx.mesh;
    const int n = mesh.size();
    const int r = mesh.rank();
    const std::size_t block = call.in.bytes();
    std::byte* out = detail::ptr(call.out.data);
    const auto at = [&](int b) { return out + static_cast<std::size_t>(b) * block; };
    detail::copy_bytes(at(r), call.in.data, block);
    if (n == 1 || block == 0) return;
    TANDEM_CHECK(detail::is_pow2(n), "recursive_doubling needs a power-of-two world, not {}", n);
    for (int mask = 1; mask < n; mask <<= 1) {
      const int peer = r ^ mask;
      const std::size_t bytes = static_cast<std::size_t>(mask) * block;
      Request s = Request::make_send(peer, call.tag, at(r & ~(mask - 1)), bytes);
      Request q = Request::make_recv(peer, call.tag, at(peer & ~(mask - 1)), bytes);
      detail::sendrecv(mesh, s, q, call.deadline);
    }
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_allgather_recursive_doubling() {
  return std::make_unique<RecursiveDoubling>();
}

}  // namespace tandem::algorithms
