// One-copy allgather over registered buffers (Communicator::allocate): when every rank is
// reached through shared memory and every rank's input lies in the same registered buffer
// (any offset; in place included), the ranks tell each other where (24 bytes each way), every
// rank copies every peer's block straight out of that peer's input into its own output, and
// a last sync keeps the inputs untouched until every rank has read them. Otherwise the call
// runs as the ring after that exchange, so every rank decides alike.

#include "algorithms/direct.hpp"

#include "algorithms/builtin.hpp"

#include <vector>

namespace tandem::algorithms {
namespace {

class Direct final : public Algorithm {
 public:
  Direct() : Algorithm(CollectiveKind::allgather, "direct") {}

  void run(const Call& call, Context& ctx) const override {
    transport::Mesh& mesh = ctx.mesh;
    const std::size_t bytes = call.in.bytes();
    if (mesh.size() == 1 || bytes == 0 || !detail::all_shm(mesh))
      return detail::run_ring(call, ctx);
    const int n = mesh.size();
    const int r = mesh.rank();
    const auto where = detail::exchange_regions(call, mesh, false);
    if (!where) return detail::run_ring(call, ctx);
    std::byte* out = detail::ptr(call.out.data);
    detail::copy_bytes(out + static_cast<std::size_t>(r) * bytes, call.in.data, bytes);
    const bool stream = core::streams(call.out.bytes());
    for (int k = 1; k < n; ++k) {
      const int p = detail::mod(r + k, n);
      const detail::Where& w = (*where)[static_cast<std::size_t>(p)];
      core::copy(out + static_cast<std::size_t>(p) * bytes,
                 detail::peer_buffer(mesh, p, w.in_region, w.in_offset, bytes), bytes, stream);
    }
    // Every rank has read every input: the callers may overwrite them once this returns.
    detail::sync(call, mesh);
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_allgather_direct() {
  return std::make_unique<Direct>();
}

}  // namespace tandem::algorithms
