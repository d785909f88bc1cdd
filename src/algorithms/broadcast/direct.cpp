// One-copy broadcast. When every rank is reached through shared memory, the root and every
// other rank exchange one small message each way (where the root's source lies; where the
// rank's output lies; each one's size, checked by both before anything is copied), and every
// rank copies the data straight out of the root's buffer:
// - from the mapping, when the source lies in a registered buffer (Communicator::allocate;
//   only the root's buffer needs to be registered);
// - else with cross-memory attach (process_vm_readv, algorithms/cma.hpp) when the root may
//   use it. A rank whose read is refused (or that has CMA off) asks the root to send instead.
// A root broadcasting in place has no copy of its own to make, so where it may use
// cross-memory attach it writes the last 1/n of the data into every rank's output itself
// (process_vm_writev) while the ranks copy the rest: the root's core copies too, and each side
// moves (n-1)/n of the data. A part the root could not write is sent instead.
// Last, one byte each way: every rank tells the root it is done with the source (or what it
// needs sent), the root tells every rank whether a part of its output follows. So the root
// returns once every rank read its buffer, and a rank once its output is whole. Otherwise (a
// peer over TCP, or CMA off on the root and the source unregistered) the call runs as a ring
// after the first messages, every rank deciding alike.

#include "algorithms/direct.hpp"

#include "algorithms/builtin.hpp"

#include <limits>
#include <unistd.h>
#include <vector>

namespace tandem::algorithms {
namespace {

/// The root's message: where its source lies.
struct Spot {
  std::uint32_t region = 0;  ///< 0: the root's source is not registered
  std::uint32_t cma = 0;     ///< the root's cma_tag() (0: no cross-memory attach)
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
  std::uint64_t address = 0;  ///< the source in the root's address space
  std::int32_t pid = 0;
  std::uint32_t tail_lines = 0;  ///< 64-byte lines at the end the root writes itself (0: none)
};
static_assert(sizeof(Spot) == 40);  // a shm slot's inline payload

/// A rank's message to the root: where its output lies and how large it is, for the root's
/// writes. The root checks the size before it writes: the tag hashes the size into 32 bits,
/// and a collision between calls of different sizes must not become a write past an output.
struct Reply {
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
  std::int32_t pid = 0;
  std::uint32_t cma = 0;  ///< the rank's cma_tag()
};
static_assert(sizeof(Reply) == 24);

// A registered source is copied out of its mapping, with no system call: the root's write of
// its part pays from 512 KiB (docs/benchmarks-large.md). A plain source's reads are system
// calls either way, and the root's part pays at every size direct runs.
constexpr std::size_t kSplitRegisteredBytes = 512u << 10;

// What a rank answers the root: 0 done, 1 please send my part. The root's byte: 0 nothing
// follows, 1 the part it could not write follows.
constexpr std::uint8_t kDone = 0;
constexpr std::uint8_t kSend = 1;

/// The part at the end of `bytes` that the root writes into each of the n-1 other ranks'
/// outputs: 1/n, in whole cache lines, so that its writes take as long as a rank's read of the
/// rest. In 64-byte lines (Spot::tail_lines); 0 where that does not fit.
std::uint32_t tail_lines(std::size_t bytes, int n) noexcept {
  const std::size_t lines = bytes / static_cast<std::size_t>(n) / 64;
  return lines > std::numeric_limits<std::uint32_t>::max() ? 0 : static_cast<std::uint32_t>(lines);
}

/// The bytes at the end of the data that the root writes into the output of the rank that
/// sent `reply` (0: none, the rank copies all of it): both sides decide from the same two
/// messages.
std::size_t root_part(const Spot& spot, const Reply& reply) noexcept {
  return spot.cma == reply.cma ? std::size_t{spot.tail_lines} * 64 : 0;
}

void run_root(const Call& call, transport::Mesh& mesh, std::size_t bytes, const Spot& spot,
              Context& ctx);
void run_peer(const Call& call, transport::Mesh& mesh, std::size_t bytes, Context& ctx);

class Direct final : public Algorithm {
 public:
  Direct() : Algorithm(CollectiveKind::broadcast, "direct") {}

  void run(const Call& call, Context& ctx) const override {
    transport::Mesh& mesh = ctx.mesh;
    const std::size_t bytes = call.out.bytes();
    if (mesh.size() == 1 || bytes == 0 || !detail::all_shm(mesh))
      return detail::run_ring(call, ctx);
    if (mesh.rank() != call.root) return run_peer(call, mesh, bytes, ctx);
    Spot spot;
    if (const auto at = mesh.regions()->locate(call.in.data, bytes)) {
      spot.region = at->region;
      spot.offset = at->offset;
    }
    const bool in_place = call.in.data == call.out.data;
    spot.cma = detail::cma_tag();
    spot.bytes = bytes;
    spot.address = reinterpret_cast<std::uintptr_t>(call.in.data);
    spot.pid = static_cast<std::int32_t>(::getpid());
    if (spot.cma != 0 && in_place && (spot.region == 0 || bytes >= kSplitRegisteredBytes))
      spot.tail_lines = tail_lines(bytes, mesh.size());
    run_root(call, mesh, bytes, spot, ctx);
  }
};

void run_root(const Call& call, transport::Mesh& mesh, std::size_t bytes, const Spot& spot,
              Context& ctx) {
  const int n = mesh.size();
  const int r = mesh.rank();
  const auto un = static_cast<std::size_t>(n);
  std::vector<Reply> replies(un);
  {
    detail::Batch hello(mesh, 2 * (un - 1));
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      hello.post(transport::Request::make_send(p, call.tag, &spot, sizeof spot));
      hello.post(transport::Request::make_recv(p, call.tag, &replies[static_cast<std::size_t>(p)],
                                               sizeof(Reply)));
    }
    detail::wait_all(mesh, {&hello}, call.deadline);
  }
  for (int p = 0; p < n; ++p) {
    const std::uint64_t theirs = replies[static_cast<std::size_t>(p)].bytes;
    if (p != r && theirs != bytes) detail::throw_size_mismatch(call, p, bytes, theirs);
  }
  if (spot.region == 0 && spot.cma == 0) return detail::run_ring(call, ctx);
  detail::copy_bytes(call.out.data, call.in.data, bytes);
  const std::byte* src = detail::ptr(call.in.data);
  // follows[p]: the part rank p's output still needs from this rank after the writes.
  std::vector<std::uint8_t> follows(un, kDone);
  std::vector<std::uint8_t> answers(un, kDone);
  for (int p = 0, written = 0; p < n; ++p) {
    const Reply& w = replies[static_cast<std::size_t>(p)];
    const std::size_t part = root_part(spot, w);
    if (p == r || part == 0) continue;
    if (written != 0) detail::stop_writing_if_given_up(call, mesh, written, 1);
    if (!detail::cma_write(w.pid, reinterpret_cast<void*>(w.address + bytes - part),
                           src + bytes - part, part))
      follows[static_cast<std::size_t>(p)] = kSend;
    ++written;
  }
  // Every rank read the source, or says it needs its part sent: the caller may overwrite it
  // once this returns.
  detail::Batch last(mesh, 2 * (un - 1));
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    const auto up = static_cast<std::size_t>(p);
    last.post(transport::Request::make_send(p, call.tag, &follows[up], 1));
    last.post(transport::Request::make_recv(p, call.tag, &answers[up], 1));
  }
  detail::wait_all(mesh, {&last}, call.deadline);
  std::size_t sends = 0;
  for (std::size_t p = 0; p < un; ++p) sends += (answers[p] == kSend) + (follows[p] == kSend);
  if (sends == 0) return;
  detail::Batch data(mesh, sends);
  for (int p = 0; p < n; ++p) {
    const auto up = static_cast<std::size_t>(p);
    const std::size_t part = root_part(spot, replies[up]);
    if (answers[up] == kSend)
      data.post(transport::Request::make_send(p, call.tag, src, bytes - part));
    if (follows[up] == kSend)
      data.post(transport::Request::make_send(p, call.tag, src + bytes - part, part));
  }
  detail::wait_all(mesh, {&data}, call.deadline);
}

void run_peer(const Call& call, transport::Mesh& mesh, std::size_t bytes, Context& ctx) {
  const Reply reply{reinterpret_cast<std::uintptr_t>(call.out.data), bytes,
                    static_cast<std::int32_t>(::getpid()), detail::cma_tag()};
  Spot spot;
  auto out = transport::Request::make_send(call.root, call.tag, &reply, sizeof reply);
  auto in = transport::Request::make_recv(call.root, call.tag, &spot, sizeof spot);
  detail::sendrecv(mesh, out, in, call.deadline);
  if (spot.bytes != bytes) detail::throw_size_mismatch(call, call.root, bytes, spot.bytes);
  if (spot.region == 0 && spot.cma == 0) return detail::run_ring(call, ctx);
  // The root writes the last tail bytes itself where it said so and this rank may be written.
  const std::size_t tail = root_part(spot, reply);
  TANDEM_CHECK(tail <= bytes, "the root (rank {}) would write {} of {} bytes", call.root, tail,
               bytes);
  const std::size_t head = bytes - tail;
  std::uint8_t answer = kDone;
  if (spot.region != 0) {
    const std::byte* src = detail::peer_buffer(mesh, call.root, spot.region, spot.offset, bytes);
    core::copy(call.out.data, src, head, core::streams(bytes));
  } else if (reply.cma != spot.cma ||
             !detail::cma_read(spot.pid, call.out.data, reinterpret_cast<const void*>(spot.address),
                               head)) {
    answer = kSend;
  }
  std::uint8_t follows = kDone;
  auto done = transport::Request::make_send(call.root, call.tag, &answer, 1);
  auto more = transport::Request::make_recv(call.root, call.tag, &follows, 1);
  detail::sendrecv(mesh, done, more, call.deadline);
  TANDEM_CHECK(follows == kDone || (follows == kSend && tail != 0),
               "the root (rank {}) announced a part of {} bytes that it does not write", call.root,
               tail);
  if (answer == kSend) {
    auto data = transport::Request::make_recv(call.root, call.tag, call.out.data, head);
    mesh.transfer(data, call.deadline);
  }
  if (follows == kSend) {
    auto data =
        transport::Request::make_recv(call.root, call.tag, detail::ptr(call.out.data) + head, tail);
    mesh.transfer(data, call.deadline);
  }
}

}  // namespace

std::unique_ptr<Algorithm> detail::make_broadcast_direct() {
  return std::make_unique<Direct>();
}

}  // namespace tandem::algorithms
