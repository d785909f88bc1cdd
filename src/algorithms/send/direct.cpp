// Point-to-point send: one message to call.root carrying call.in.

#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"

namespace tandem::algorithms {
namespace {

class Direct final : public Algorithm {
 public:
  std::string_view name() const noexcept override { return "direct"; }
  CollectiveKind kind() const noexcept override { return CollectiveKind::send; }
  bool supports(const Call&, int) const noexcept override { return true; }

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
