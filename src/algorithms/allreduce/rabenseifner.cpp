// Rabenseifner allreduce: recursive-halving reduce-scatter then recursive-doubling allgather
// among p = 2^k ranks (the n - p extra ranks fold into a neighbour first, as in recursive
// doubling). Bandwidth-optimal like the ring, with 2 log2(p) steps instead of 2(n-1). Each
// block is reduced on one rank only, so every rank gets the same bits.

#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"
#include "core/reduce.hpp"

namespace tandem::algorithms {
namespace {

class Rabenseifner final : public Algorithm {
 public:
  Rabenseifner() : Algorithm(CollectiveKind::allreduce, "rabenseifner") {}

  void run(const Call& call, Context& ctx) const override {
    using transport::Request;
    transport::Mesh& mesh = ctx.mesh;
    const int n = mesh.size();
    const DataType dt = call.out.dtype;
    const std::size_t es = dtype_size(dt);
    const std::size_t c = call.out.count;
    const std::byte* in = detail::ptr(call.in.data);
    std::byte* out = detail::ptr(call.out.data);
    if (n == 1) detail::copy_bytes(out, in, c * es);
    if (n == 1 || c == 0) return;
    const ReduceOp op = detail::wire_op(call.op);
    const auto fold = detail::fold_to_pow2(call, mesh, in, out, c, dt, op);
    if (!fold) return;  // this rank's input went to its neighbour, the result came back
    const int p = fold->p;
    const int vr = fold->vr;
    const std::byte* cur = fold->cur;  // where this rank's current partials are read from
    const auto real = [&](int v) { return fold->real(v); };
    const auto off = detail::even_offsets(c, p);
    const auto at = [&](const std::byte* base, int block) { return base + off[block] * es; };
    const auto elems = [&](int lo, int hi) { return off[hi] - off[lo]; };

    // Reduce-scatter: keep the half of the current range holding block vr, send the other.
    int lo = 0;
    int hi = p;
    for (int mask = p / 2; mask >= 1; mask /= 2) {
      const int mid = lo + mask;
      const bool upper = (vr & mask) != 0;
      const int keep_lo = upper ? mid : lo;
      const int keep_hi = upper ? hi : mid;
      const int give_lo = upper ? lo : mid;
      const int give_hi = upper ? mid : hi;
      const int peer = real(vr ^ mask);
      Request s =
          Request::make_send(peer, call.tag, at(cur, give_lo), elems(give_lo, give_hi) * es);
      Request q = Request::make_recv_reduce(peer, call.tag, out + off[keep_lo] * es,
                                            at(cur, keep_lo), elems(keep_lo, keep_hi), dt, op);
      exchange(mesh, s, q, call.deadline);
      cur = out;
      lo = keep_lo;
      hi = keep_hi;
    }
    if (call.op == ReduceOp::avg) core::divide(out + off[vr] * es, elems(vr, vr + 1), dt, n);
    // Allgather: exchange ever larger aligned groups of blocks.
    for (int mask = 1; mask < p; mask *= 2) {
      const int mine = vr & ~(mask - 1);
      const int theirs = (vr ^ mask) & ~(mask - 1);
      const int peer = real(vr ^ mask);
      Request s =
          Request::make_send(peer, call.tag, out + off[mine] * es, elems(mine, mine + mask) * es);
      Request q = Request::make_recv(peer, call.tag, out + off[theirs] * es,
                                     elems(theirs, theirs + mask) * es);
      exchange(mesh, s, q, call.deadline);
    }
    detail::unfold_from_pow2(call, mesh, *fold, out, c * es);
  }

 private:
  // Both sides of a step size their halves alike, so empty halves are skipped on both.
  static void exchange(transport::Mesh& mesh, transport::Request& s, transport::Request& q,
                       Deadline deadline) {
    if (s.bytes != 0) mesh.post(s);
    if (q.bytes != 0) mesh.post(q);
    if (s.bytes != 0) mesh.wait(s, deadline);
    if (q.bytes != 0) mesh.wait(q, deadline);
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_allreduce_rabenseifner() {
  return std::make_unique<Rabenseifner>();
}

}  // namespace tandem::algorithms
