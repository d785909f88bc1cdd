// One-copy allreduce over registered buffers (Communicator::allocate). When every rank is
// reached through shared memory and every rank's input and output lie in the same
// registered regions, each rank reduces its own slice reading the peers' inputs where they
// lie and writes it into its own output; after a sync every rank copies the other slices
// straight from their owners' outputs; a last sync lets the caller reuse its buffer at once.
// Each byte of the result is written once per rank: no slot ring, no staging copy.
//
// Whether the buffers are registered is known only per rank, so the ranks first exchange
// where their buffers lie (a 24-byte message each way) and all decide alike from the same
// facts; otherwise (or when any peer is reached through TCP) the call runs as a ring. The
// selector's cache stays right: this algorithm supports every call and decides inside.
// Syncs are tiny mesh messages, so deadlines, PeerLost and mismatch detection still apply.

#include "algorithms/direct.hpp"

#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"
#include "core/reduce.hpp"

#include <vector>

namespace tandem::algorithms {
namespace {

using detail::Where;

// Reduction chunk: the peers' inputs of one chunk and its output stay in L2 while the
// n - 1 passes over it run.
constexpr std::size_t kChunkBytes = 64u << 10;

class Direct final : public Algorithm {
 public:
  Direct() : Algorithm(CollectiveKind::allreduce, "direct") {}

  void run(const Call& call, Context& ctx) const override {
    transport::Mesh& mesh = ctx.mesh;
    if (call.out.count == 0) return;
    if (!detail::all_shm(mesh)) return detail::run_ring(call, ctx);
    const auto where = detail::exchange_regions(call, mesh, true);
    if (!where) return detail::run_ring(call, ctx);
    one_copy(call, mesh, *where);
  }

 private:
  static void one_copy(const Call& call, transport::Mesh& mesh, const std::vector<Where>& hellos) {
    const int n = mesh.size();
    const int r = mesh.rank();
    const auto un = static_cast<std::size_t>(n);
    const DataType dt = call.out.dtype;
    const std::size_t es = dtype_size(dt);
    const ReduceOp op = detail::wire_op(call.op);
    const auto off = detail::even_offsets(call.out.count, n);
    const std::size_t total = call.out.bytes();

    // Every rank's input and output as mapped here (its own: the call's buffers).
    std::vector<const std::byte*> ins(un);
    std::vector<const std::byte*> outs(un);
    for (int p = 0; p < n; ++p) {
      const auto up = static_cast<std::size_t>(p);
      if (p == r) {
        ins[up] = detail::ptr(static_cast<const void*>(call.in.data));
        outs[up] = detail::ptr(static_cast<const void*>(call.out.data));
        continue;
      }
      const detail::Where& w = hellos[up];
      ins[up] = detail::peer_buffer(mesh, p, w.in_region, w.in_at, total);
      outs[up] = detail::peer_buffer(mesh, p, w.out_region, w.out_at, total);
    }

    // Phase 1: this rank's slice from every rank's input, its own first: in place, the
    // output is its own input, which must be read before it is overwritten. (Each slice is
    // reduced by one rank only, so every rank still ends with the same bits.)
    std::byte* out = detail::ptr(call.out.data);
    const std::size_t first = off[static_cast<std::size_t>(r)];
    const std::size_t last = off[static_cast<std::size_t>(r) + 1];
    const std::size_t step = std::max<std::size_t>(1, kChunkBytes / es);
    for (std::size_t c = first; c < last; c += step) {
      const std::size_t m = std::min(step, last - c);
      std::byte* dst = out + c * es;
      const std::byte* prev = ins[static_cast<std::size_t>(r)] + c * es;
      for (int k = 1; k < n; ++k) {
        const auto p = static_cast<std::size_t>(detail::mod(r + k, n));
        core::reduce(dst, prev, ins[p] + c * es, m, dt, op);
        prev = dst;
      }
      if (call.op == ReduceOp::avg) core::divide(dst, m, dt, n);
    }

    // Phase 2, once every slice is final (and no rank reads an input any more, which an
    // in-place rank is about to overwrite): copy the other slices from their owners.
    detail::sync(call, mesh);
    const bool stream = core::streams(call.out.bytes());
    for (int k = 1; k < n; ++k) {
      const auto p = static_cast<std::size_t>(detail::mod(r + k, n));
      const std::size_t bytes = (off[p + 1] - off[p]) * es;
      core::copy(out + off[p] * es, outs[p] + off[p] * es, bytes, stream);
    }
    // Nobody reads this rank's output after this: the caller may reuse it at once.
    detail::sync(call, mesh);
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_allreduce_direct() {
  return std::make_unique<Direct>();
}

}  // namespace tandem::algorithms
