// Point-to-point receive: one message from call.root into call.out.

#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"

namespace tandem::algorithms {
namespace {

class Direct final : public Algorithm {
 public:
  Direct() : Algorithm(CollectiveKind::recv, "direct") {}

  void run(const Call& call, Context& ctx) const override {
    transport::Request q =
        transport::Request::make_recv(call.root, call.tag, call.out.data, call.out.bytes());
    ctx.mesh.post(q);
    ctx.mesh.wait(q, call.deadline);
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_recv_direct() {
  return std::make_unique<Direct>();
}

}  // namespace tandem::algorithms
