// One-copy broadcast from a registered buffer (Communicator::allocate): when every rank is
// reached through shared memory and the root's source lies in a registered buffer, the root
// tells every rank where (one 24-byte message each), every rank copies the data straight out
// of the root's buffer, and the root returns once every rank said it is done (so the root may
// reuse its buffer at once). Only the root's buffer needs to be registered. Otherwise the call
// runs as a ring after that one message, so every rank decides alike.

#include "algorithms/direct.hpp"

#include "algorithms/builtin.hpp"

#include <vector>

namespace tandem::algorithms {
namespace {

struct Spot {
  std::uint32_t region = 0;  ///< 0: the root's source is not registered
  std::uint32_t reserved = 0;
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
};
static_assert(sizeof(Spot) == 24);

class Direct final : public Algorithm {
 public:
  Direct() : Algorithm(CollectiveKind::broadcast, "direct") {}

  void run(const Call& call, Context& ctx) const override {
    transport::Mesh& mesh = ctx.mesh;
    const int n = mesh.size();
    const int r = mesh.rank();
    const std::size_t bytes = call.out.bytes();
    if (n == 1 || bytes == 0 || !detail::all_shm(mesh)) return detail::run_ring(call, ctx);
    const auto& pool = *mesh.regions();
    Spot spot;
    if (r == call.root) {
      if (const auto at = pool.locate(call.in.data, bytes)) {
        spot.region = at->region;
        spot.offset = at->offset;
      }
      spot.bytes = bytes;
      detail::Batch hellos(mesh, static_cast<std::size_t>(n - 1));
      for (int p = 0; p < n; ++p)
        if (p != r) hellos.post(transport::Request::make_send(p, call.tag, &spot, sizeof spot));
      detail::wait_all(mesh, {&hellos}, call.deadline);
      if (spot.region == 0) return detail::run_ring(call, ctx);
      detail::copy_bytes(call.out.data, call.in.data, bytes);
      // Every rank read the source: the caller may overwrite it once this returns.
      std::vector<std::byte> marks(static_cast<std::size_t>(n));
      detail::Batch dones(mesh, static_cast<std::size_t>(n - 1));
      for (int p = 0; p < n; ++p)
        if (p != r)
          dones.post(
              transport::Request::make_recv(p, call.tag, &marks[static_cast<std::size_t>(p)], 1));
      detail::wait_all(mesh, {&dones}, call.deadline);
      return;
    }
    auto hello = transport::Request::make_recv(call.root, call.tag, &spot, sizeof spot);
    mesh.post(hello);
    mesh.wait(hello, call.deadline);
    if (spot.region == 0) return detail::run_ring(call, ctx);
    TANDEM_CHECK(spot.bytes == bytes, "the root (rank {}) broadcasts {} bytes where {} were due",
                 call.root, spot.bytes, bytes);
    const std::byte* src = detail::peer_buffer(mesh, call.root, spot.region, spot.offset, bytes);
    core::copy(call.out.data, src, bytes, core::streams(bytes));
    const std::byte mark{1};
    auto done = transport::Request::make_send(call.root, call.tag, &mark, 1);
    mesh.post(done);
    mesh.wait(done, call.deadline);
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_broadcast_direct() {
  return std::make_unique<Direct>();
}

}  // namespace tandem::algorithms
