// One-copy broadcast. When every rank is reached through shared memory, the root tells every
// rank where its source lies (one 40-byte message each) and every rank copies the data
// straight out of the root's buffer:
// - from the mapping, when the source lies in a registered buffer (Communicator::allocate;
//   only the root's buffer needs to be registered);
// - else with cross-memory attach (process_vm_readv, algorithms/cma.hpp) when the root may
//   use it. A rank whose read is refused (or that has CMA off) asks the root to send instead.
// Every rank tells the root when it is done (or what it needs), and the root returns once all
// did, so it may reuse its buffer at once. Otherwise (a peer over TCP, or CMA off on the root
// and the source unregistered) the call runs as a ring after that one message, every rank
// deciding alike.

#include "algorithms/direct.hpp"

#include "algorithms/builtin.hpp"

#include <unistd.h>
#include <vector>

namespace tandem::algorithms {
namespace {

struct Spot {
  std::uint32_t region = 0;  ///< 0: the root's source is not registered
  std::uint32_t cma = 0;     ///< the root's cma_tag() (0: no cross-memory attach)
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
  std::uint64_t address = 0;  ///< the source in the root's address space
  std::int32_t pid = 0;
  std::uint32_t reserved = 0;
};
static_assert(sizeof(Spot) == 40);  // a shm slot's inline payload

// Cross-memory attach only below this size: from 1 MiB one rank reading alone (one copy at
// the memory's speed) lost to the ring, whose two copies run at once on both ranks (2 ranks,
// in place: 1 MiB 90 against 60 us, 2 MiB 232 against 147).
constexpr std::size_t kCmaMaxBytes = 1u << 20;

// What a rank answers the root: 0 done, 1 please send the data.
constexpr std::uint8_t kDone = 0;
constexpr std::uint8_t kSend = 1;

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
      spot.cma = bytes < kCmaMaxBytes ? detail::cma_tag() : 0;
      spot.bytes = bytes;
      spot.address = reinterpret_cast<std::uintptr_t>(call.in.data);
      spot.pid = static_cast<std::int32_t>(::getpid());
      detail::Batch hellos(mesh, static_cast<std::size_t>(n - 1));
      for (int p = 0; p < n; ++p)
        if (p != r) hellos.post(transport::Request::make_send(p, call.tag, &spot, sizeof spot));
      detail::wait_all(mesh, {&hellos}, call.deadline);
      if (spot.region == 0 && spot.cma == 0) return detail::run_ring(call, ctx);
      detail::copy_bytes(call.out.data, call.in.data, bytes);
      // Every rank read the source, or says it needs it sent: the caller may overwrite it once
      // this returns.
      std::vector<std::uint8_t> answers(static_cast<std::size_t>(n), kDone);
      detail::Batch dones(mesh, static_cast<std::size_t>(n - 1));
      for (int p = 0; p < n; ++p)
        if (p != r)
          dones.post(
              transport::Request::make_recv(p, call.tag, &answers[static_cast<std::size_t>(p)], 1));
      detail::wait_all(mesh, {&dones}, call.deadline);
      std::size_t sends = 0;
      for (std::uint8_t a : answers) sends += a == kSend ? 1 : 0;
      if (sends == 0) return;
      detail::Batch data(mesh, sends);
      for (int p = 0; p < n; ++p)
        if (answers[static_cast<std::size_t>(p)] == kSend)
          data.post(transport::Request::make_send(p, call.tag, call.in.data, bytes));
      detail::wait_all(mesh, {&data}, call.deadline);
      return;
    }
    auto hello = transport::Request::make_recv(call.root, call.tag, &spot, sizeof spot);
    mesh.post(hello);
    mesh.wait(hello, call.deadline);
    if (spot.region == 0 && spot.cma == 0) return detail::run_ring(call, ctx);
    TANDEM_CHECK(spot.bytes == bytes, "the root (rank {}) broadcasts {} bytes where {} were due",
                 call.root, spot.bytes, bytes);
    std::uint8_t answer = kDone;
    if (spot.region != 0) {
      const std::byte* src = detail::peer_buffer(mesh, call.root, spot.region, spot.offset, bytes);
      core::copy(call.out.data, src, bytes, core::streams(bytes));
    } else if (detail::cma_tag() != spot.cma ||
               !detail::cma_read(spot.pid, call.out.data,
                                 reinterpret_cast<const void*>(spot.address), bytes)) {
      answer = kSend;
    }
    auto done = transport::Request::make_send(call.root, call.tag, &answer, 1);
    mesh.post(done);
    mesh.wait(done, call.deadline);
    if (answer == kSend) {
      auto data = transport::Request::make_recv(call.root, call.tag, call.out.data, bytes);
      mesh.post(data);
      mesh.wait(data, call.deadline);
    }
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_broadcast_direct() {
  return std::make_unique<Direct>();
}

}  // namespace tandem::algorithms
