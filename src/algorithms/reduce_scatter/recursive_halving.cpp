// Recursive-halving reduce-scatter (power-of-two worlds): in step k each rank exchanges half
// of its current range of blocks with the rank 2^(log2 n - 1 - k) away, keeping the half that
// holds its own block; log2(n) steps, each block reduced on one rank only.

#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"
#include "core/reduce.hpp"

namespace tandem::algorithms {
namespace {

class RecursiveHalving final : public Algorithm {
 public:
  RecursiveHalving() : Algorithm(CollectiveKind::reduce_scatter, "recursive_halving") {}
  bool supports(const Call&, int world) const noexcept override { return detail::is_pow2(world); }

  void run(const Call& call, Context& ctx) const override {
    using transport::Request;
    transport::Mesh& mesh = ctx.mesh;
    const int n = mesh.size();
    const int r = mesh.rank();
    const DataType dt = call.out.dtype;
    const std::size_t block = call.out.count * dtype_size(dt);
    const std::byte* in = detail::ptr(call.in.data);
    std::byte* out = detail::ptr(call.out.data);
    const auto at = [&](auto* base, int b) { return base + static_cast<std::size_t>(b) * block; };
    if (n == 1) detail::copy_bytes(out, in, block);
    if (n == 1 || block == 0) return;
    TANDEM_CHECK(detail::is_pow2(n), "recursive_halving needs a power-of-two world, not {}", n);
    const ReduceOp op = detail::wire_op(call.op);
    // Partials live in scratch with the layout of `in`, which stays untouched.
    std::byte* work = ctx.scratch.get(block * static_cast<std::size_t>(n));
    const std::byte* cur = in;
    int lo = 0;  // first block of the range this rank still reduces (2 * mask blocks)
    for (int mask = n / 2; mask >= 1; mask /= 2) {
      const int mid = lo + mask;
      const bool upper = (r & mask) != 0;
      const int keep = upper ? mid : lo;
      const int give = upper ? lo : mid;
      const int peer = r ^ mask;
      std::byte* dst = mask == 1 ? out : at(work, keep);
      Request s =
          Request::make_send(peer, call.tag, at(cur, give), static_cast<std::size_t>(mask) * block);
      Request q =
          Request::make_recv_reduce(peer, call.tag, dst, at(cur, keep),
                                    static_cast<std::size_t>(mask) * call.out.count, dt, op);
      detail::sendrecv(mesh, s, q, call.deadline);
      cur = work;
      lo = keep;
    }
    if (call.op == ReduceOp::avg) core::divide(out, call.out.count, dt, n);
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_reduce_scatter_recursive_halving() {
  return std::make_unique<RecursiveHalving>();
}

}  // namespace tandem::algorithms
