// Pairwise-exchange alltoall: in step k rank r sends block r+k to rank r+k and receives
// block r-k from rank r-k, so every rank talks to one peer per step in each direction. A few
// steps are kept in flight to overlap their latencies.

#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"

namespace tandem::algorithms {
namespace {

constexpr int kStepsInFlight = 4;

class Pairwise final : public Algorithm {
 public:
  Pairwise() : Algorithm(CollectiveKind::alltoall, "pairwise") {}

  void run(const Call& call, Context& ctx) const override {
    using transport::Request;
    transport::Mesh& mesh = ctx.mesh;
    const int n = mesh.size();
    const int r = mesh.rank();
    const std::size_t block = call.in.bytes() / static_cast<std::size_t>(n);
    const std::byte* in = detail::ptr(call.in.data);
    std::byte* out = detail::ptr(call.out.data);
    const auto at = [&](auto* base, int b) { return base + static_cast<std::size_t>(b) * block; };
    if (block == 0) return;
    if (call.in_place() && n > 1) {
      // Received blocks overwrite ones still to be sent: send from a copy.
      std::byte* copy = ctx.scratch.get(block * static_cast<std::size_t>(n));
      detail::copy_bytes(copy, in, block * static_cast<std::size_t>(n));
      in = copy;
    }
    detail::Batch reqs(mesh, 2 * static_cast<std::size_t>(n));
    const auto post_step = [&](int k) {
      const int to = detail::mod(r + k, n);
      const int from = detail::mod(r - k, n);
      reqs.post(Request::make_recv(from, call.tag, at(out, from), block));
      reqs.post(Request::make_send(to, call.tag, at(in, to), block));
    };
    for (int k = 1; k < n && k <= kStepsInFlight; ++k) post_step(k);
    detail::copy_bytes(at(out, r), at(in, r), block);
    for (int k = 1; k < n; ++k) {
      const auto i = 2 * static_cast<std::size_t>(k - 1);
      std::array<Request*, 2> step{&reqs[i], &reqs[i + 1]};
      mesh.wait(step, call.deadline);
      if (k + kStepsInFlight < n) post_step(k + kStepsInFlight);
    }
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_alltoall_pairwise() {
  return std::make_unique<Pairwise>();
}

}  // namespace tandem::algorithms
