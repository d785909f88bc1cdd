// Point-to-point send: one message to call.root carrying call.in.

#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"

namespace tandem::algorithms {
namespace {

class Direct final : public Algorithm {
 public:
  Direct() : Algorithm(CollectiveKind::send, "direct") {}

  void run(const Call& call, Context& ctx) const override {
    transport::Request s =
        transport::Request::make_send(call.root, call.tag, call.in.data, call.in.bytes());
    ctx.mesh.post(s);
    ctx.mesh.wait(s, call.deadline);
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_send_direct() {
  return std::make_unique<Direct>();
}

}  // namespace tandem::algorithms
