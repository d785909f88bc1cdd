// One-copy allgather. When every rank is reached through shared memory, the ranks tell each
// other where their buffers lie (40 bytes each way), and:
// - when every input lies in the same registered buffer (Communicator::allocate; any offset,
//   in place included), every rank copies every peer's block out of the mapping;
// - else, when every rank may use cross-memory attach (algorithms/cma.hpp), every rank copies
//   its own block into its output and writes it into every peer's output (process_vm_writev),
//   a piece at a time, from whichever copy the piece's copy left in its cache. A write the kernel
//   refuses is not fatal: each rank tells each peer whether its block arrived or follows, and sends
//   what it could not write.
// A last exchange keeps the buffers in use until every rank is done with them. Otherwise (a
// peer over TCP, CMA off on some rank) the call runs as the ring, every rank deciding alike.
#include "algorithms/direct.hpp"

#include "algorithms/builtin.hpp"

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

namespace tandem::algorithms {
namespace {

class Direct final : public Algorithm {
 public:
  Direct() : Algorithm(CollectiveKind::allgather, "direct") {}

  void run(const Call& call, Context& ctx) const override {
    transport::Mesh& mesh = ctx.mesh;
    const std::size_t bytes = call.in.bytes();
    if (mesh.size() == 1 || bytes == 0 || !detail::all_shm(mesh)) return fallback(call, ctx);
    const int n = mesh.size();
    const int r = mesh.rank();
    const auto where = detail::exchange_where(call, mesh, false);
    const bool registered = detail::all_registered(where, r, false);
    // Every rank may use CMA, all in one pid namespace: the pids in the hellos are theirs.
    const std::uint32_t tag = where[static_cast<std::size_t>(r)].cma;
    const bool cma =
        tag != 0 && std::all_of(where.begin(), where.end(),
                                [tag](const detail::Where& w) { return w.cma == tag; });
    if (!registered && !cma) return fallback(call, ctx);
    std::byte* out = detail::ptr(call.out.data);
    if (!registered) return write_with_cma(call, mesh, where, out, bytes);
    detail::copy_bytes(out + static_cast<std::size_t>(r) * bytes, call.in.data, bytes);
    const bool stream = core::streams(call.out.bytes());
    for (int k = 1; k < n; ++k) {
      const int p = detail::mod(r + k, n);
      const detail::Where& w = where[static_cast<std::size_t>(p)];
      core::copy(out + static_cast<std::size_t>(p) * bytes,
                 detail::peer_buffer(mesh, p, w.in_region, w.in_at, bytes), bytes, stream);
    }
    // Every rank has read every input: the callers may overwrite them once this returns.
    detail::sync(call, mesh);
  }

 private:
  // Without one copy: the log-step algorithms below 64 KiB of result (fewer steps, which
  // count over TCP), the ring above.
  static void fallback(const Call& call, Context& ctx) {
    if (call.out.bytes() < (64u << 10)) {
      for (std::string_view name : {"recursive_doubling", "bruck"}) {
        const Algorithm* a = Registry::builtin().find(CollectiveKind::allgather, name);
        if (a != nullptr && a->supports(call, ctx.mesh.size())) {
          ctx.ran = a;
          return a->run(call, ctx);
        }
      }
    }
    detail::run_ring(call, ctx);
  }

  // Each rank copies its own block into its output and writes it into every peer's output
  // (process_vm_writev), a piece at a time: the piece a write reads is still in this core's
  // cache from the copy, so the input is read once, where reading every peer's input would
  // read each input twice (its owner's copy and the peer's read). An output of
  // core::streams() size takes the own copy with streaming stores (no read of the output's
  // lines first; nothing reads them during the call) and the writes from the input, which
  // that copy just read into the cache (docs/benchmarks-large.md).
  static void write_with_cma(const Call& call, transport::Mesh& mesh,
                             const std::vector<detail::Where>& where, std::byte* out,
                             std::size_t bytes) {
    const int n = mesh.size();
    const int r = mesh.rank();
    const auto un = static_cast<std::size_t>(n);
    const std::size_t at = static_cast<std::size_t>(r) * bytes;
    std::byte* mine = out + at;
    const auto* in = static_cast<const std::byte*>(call.in.data);
    // In place the block is where it goes: one write per peer, nothing to copy.
    const bool copy = in != mine;
    const std::size_t piece = copy ? kPieceBytes : bytes;
    const bool stream = copy && core::streams(call.out.bytes());
    const std::byte* from = stream ? in : mine;
    // refused[p]: the kernel refused a write into rank p (CMA is off here from then on), which
    // gets the whole block sent instead; sent[p]: rank p could not write into this rank.
    std::vector<std::uint8_t> refused(un, 0);
    std::vector<std::uint8_t> sent(un, 0);
    for (std::size_t off = 0, written = 0; off < bytes; off += piece, ++written) {
      if (written != 0) detail::stop_writing_if_given_up(call, mesh, written, kAliveEvery);
      const std::size_t len = std::min(piece, bytes - off);
      if (stream)
        core::copy(mine + off, in + off, len, true);
      else if (copy)
        detail::copy_bytes(mine + off, in + off, len);
      for (int k = 1; k < n; ++k) {
        const int p = detail::mod(r + k, n);
        const auto up = static_cast<std::size_t>(p);
        if (refused[up] != 0) continue;
        auto* remote = reinterpret_cast<std::byte*>(where[up].out_at) + at + off;
        refused[up] = detail::cma_write(where[up].pid, remote, from + off, len) ? 0 : 1;
      }
    }
    // Tell every peer whether its copy of this block is complete: after this nobody writes
    // into another rank's output any more.
    detail::exchange(call, mesh, refused.data(), 1, reinterpret_cast<std::byte*>(sent.data()), 1);
    // What could not be written travels through shared memory.
    std::size_t moves = 0;
    for (std::size_t p = 0; p < un; ++p) moves += refused[p] + sent[p];
    if (moves == 0) return;
    detail::Batch data(mesh, moves);
    for (int p = 0; p < n; ++p)
      if (sent[static_cast<std::size_t>(p)] != 0)
        data.post(transport::Request::make_recv(p, call.tag,
                                                out + static_cast<std::size_t>(p) * bytes, bytes));
    for (int p = 0; p < n; ++p)
      if (refused[static_cast<std::size_t>(p)] != 0)
        data.post(transport::Request::make_send(p, call.tag, mine, bytes));
    detail::wait_all(mesh, {&data}, call.deadline);
  }

  // The piece copied and then written: a few of them fit a core's L2 with the lines they are
  // written over (docs/benchmarks-large.md).
  static constexpr std::size_t kPieceBytes = 256u << 10;
  // A look at the peers' liveness every 4 MiB: its few microseconds are small against the
  // time 4 MiB of writes take.
  static constexpr std::size_t kAliveEvery = 16;
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_allgather_direct() {
  return std::make_unique<Direct>();
}

}  // namespace tandem::algorithms
