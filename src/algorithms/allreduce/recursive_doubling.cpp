// Recursive-doubling allreduce for small messages: log2(p) exchange steps of the whole
// message, p the largest power of two <= n. The n - p extra ranks first fold their input
// into a neighbour (even rank 2i into 2i+1) and get the result back at the end. Both
// partners of a step compute a op b, resp. b op a: identical bits, as op is commutative.

#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"
#include "core/reduce.hpp"

namespace tandem::algorithms {
namespace {

class RecursiveDoubling final : public Algorithm {
 public:
  RecursiveDoubling() : Algorithm(CollectiveKind::allreduce, "recursive_doubling") {}

  void run(const Call& call, Context& ctx) const override {
    using transport::Request;
    transport::Mesh& mesh = ctx.mesh;
    const int n = mesh.size();
    const DataType dt = call.out.dtype;
    const std::size_t c = call.out.count;
    const std::size_t bytes = c * dtype_size(dt);
    const std::byte* in = detail::ptr(call.in.data);
    std::byte* out = detail::ptr(call.out.data);
    if (n == 1) detail::copy_bytes(out, in, bytes);
    if (n == 1 || c == 0) return;
    const ReduceOp op = detail::wire_op(call.op);
    const auto fold = detail::fold_to_pow2(call, mesh, in, out, c, dt, op);
    if (!fold) return;  // this rank's input went to its neighbour, the result came back
    const std::byte* cur = fold->cur;
    // Ping-pong between `out` and scratch: a step reads `cur` (which is also being sent)
    // and writes the other buffer.
    std::byte* spare = ctx.scratch.get(bytes);
    for (int mask = 1; mask < fold->p; mask <<= 1) {
      const int peer = fold->real(fold->vr ^ mask);
      std::byte* target = cur == out ? spare : out;
      Request s = Request::make_send(peer, call.tag, cur, bytes);
      Request q = Request::make_recv_reduce(peer, call.tag, target, cur, c, dt, op);
      detail::sendrecv(mesh, s, q, call.deadline);
      cur = target;
    }
    detail::copy_bytes(out, cur, bytes);
    if (call.op == ReduceOp::avg) core::divide(out, c, dt, n);
    detail::unfold_from_pow2(call, mesh, *fold, out, bytes);
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_allreduce_recursive_doubling() {
  return std::make_unique<RecursiveDoubling>();
}

}  // namespace tandem::algorithms
