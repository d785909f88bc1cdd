// One-copy reduce-scatter over registered buffers (Communicator::allocate): when every rank
// is reached through shared memory and every rank's input lies in the same registered buffer
// (any offset; in place included), the ranks tell each other where (24 bytes each way), each
// rank reduces its own block straight from every rank's input, in cache-sized chunks, into
// its output, and a last sync keeps the inputs untouched until every rank has read them.
// Otherwise the call runs as the ring after that exchange, so every rank decides alike.

#include "algorithms/direct.hpp"

#include "algorithms/builtin.hpp"
#include "core/reduce.hpp"

#include <vector>

namespace tandem::algorithms {
namespace {

constexpr std::size_t kChunkBytes = 64u << 10;  // as the direct allreduce

class Direct final : public Algorithm {
 public:
  Direct() : Algorithm(CollectiveKind::reduce_scatter, "direct") {}

  void run(const Call& call, Context& ctx) const override {
    transport::Mesh& mesh = ctx.mesh;
    const std::size_t count = call.out.count;
    if (mesh.size() == 1 || count == 0 || !detail::all_shm(mesh))
      return detail::run_ring(call, ctx);
    const int n = mesh.size();
    const int r = mesh.rank();
    const auto un = static_cast<std::size_t>(n);
    const DataType dt = call.out.dtype;
    const std::size_t es = dtype_size(dt);
    const std::size_t in_bytes = call.in.bytes();
    const auto where = detail::exchange_regions(call, mesh, false);
    if (!where) return detail::run_ring(call, ctx);
    std::vector<const std::byte*> ins(un);
    for (int p = 0; p < n; ++p) {
      const detail::Where& w = (*where)[static_cast<std::size_t>(p)];
      ins[static_cast<std::size_t>(p)] =
          p == r ? detail::ptr(static_cast<const void*>(call.in.data))
                 : detail::peer_buffer(mesh, p, w.in_region, w.in_at, in_bytes);
    }
    // Block r of every input, this rank's own first: in place, the output is that block.
    const ReduceOp op = detail::wire_op(call.op);
    const std::size_t base = static_cast<std::size_t>(r) * count;
    std::byte* out = detail::ptr(call.out.data);
    const std::size_t step = std::max<std::size_t>(1, kChunkBytes / es);
    for (std::size_t c = 0; c < count; c += step) {
      const std::size_t m = std::min(step, count - c);
      std::byte* dst = out + c * es;
      const std::byte* prev = ins[static_cast<std::size_t>(r)] + (base + c) * es;
      for (int k = 1; k < n; ++k) {
        const auto p = static_cast<std::size_t>(detail::mod(r + k, n));
        core::reduce(dst, prev, ins[p] + (base + c) * es, m, dt, op);
        prev = dst;
      }
      if (call.op == ReduceOp::avg) core::divide(dst, m, dt, n);
    }
    // Every rank has read every input: the callers may overwrite them once this returns.
    detail::sync(call, mesh);
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_reduce_scatter_direct() {
  return std::make_unique<Direct>();
}

}  // namespace tandem::algorithms
