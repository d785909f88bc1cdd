// Ring allgather with per-rank counts: the allgather ring over the blocks call.counts gives.

#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"
#include "algorithms/parts.hpp"

namespace tandem::algorithms {
namespace {

class Ring final : public Algorithm {
 public:
  Ring() : Algorithm(CollectiveKind::allgatherv, "ring") {}
  bool supports(const Call& call, int world) const noexcept override {
    return call.counts.size() == static_cast<std::size_t>(world);
  }

  void run(const Call& call, Context& ctx) const override {
    const auto off = detail::prefix_offsets(call.counts);
    detail::ring_allgather(call, ctx, call.out.dtype, detail::ptr(call.in.data),
                           detail::ptr(call.out.data), off);
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_allgatherv_ring() {
  return std::make_unique<Ring>();
}

}  // namespace tandem::algorithms
