// Communicator::set_timeout() reaches everything that waits on the communicator's behalf, not
// only its calls: the device backend (and the store it is given) read the new value, also when
// the backend was made before the change. (The stall report's: detection_test.cpp.)
#include "comm/device/backend.hpp"
#include "mp_util.hpp"

#include <tandem/error.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace tandem::mptest {
namespace {

using namespace std::chrono_literals;

// A device backend for CUDA buffers that runs nothing: it records, at each call, the timeout
// its DeviceSetup holds and the one of the store it was given. No GPU is needed to see what
// the communicator hands a backend (the real ones read the same two fields).
struct Seen {
  std::chrono::milliseconds setup_timeout{0};
  std::chrono::milliseconds store_timeout{0};
};
std::vector<Seen> g_seen;

class RecordingBackend final : public comm::DeviceBackend {
 public:
  explicit RecordingBackend(const comm::DeviceSetup& setup) : setup_(setup) {}
  std::string_view name() const noexcept override { return "recording"; }
  Device device() const noexcept override { return setup_.device; }
  void run(const algorithms::Call&) override {
    g_seen.push_back({setup_.timeout.get(), setup_.store->timeout()});
  }
  void abort() noexcept override {}

 private:
  comm::DeviceSetup setup_;
};

std::unique_ptr<comm::DeviceBackend> make_recording(const comm::DeviceSetup& setup) {
  return std::make_unique<RecordingBackend>(setup);
}

TEST(SetTimeout, TheDeviceBackendAndItsStoreFollowIt) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        comm::register_device_backend(Device::Kind::cuda, &make_recording);
        auto comm = connect(ctx);
        // Never dereferenced: the recording backend runs nothing.
        const auto view =
            BufferView::raw(reinterpret_cast<void*>(std::uintptr_t{0x1000}), 4, DataType::f32);
        BufferView on_device = view;
        on_device.device = Device::cuda(0);
        comm->allreduce(on_device, ReduceOp::sum);  // makes the backend: 60 s
        comm->set_timeout(7s);
        comm->allreduce(on_device, ReduceOp::sum);
        ASSERT_EQ(g_seen.size(), 2u);
        EXPECT_EQ(g_seen[0].setup_timeout, 60s);
        EXPECT_EQ(g_seen[0].store_timeout, 60s);
        EXPECT_EQ(g_seen[1].setup_timeout, 7s);
        EXPECT_EQ(g_seen[1].store_timeout, 7s);
        EXPECT_EQ(comm->shared_timeout().get(), 7s);
      },
      run_options("tcp", {"TANDEM_TIMEOUT=60"}));
  testing::expect_all_ok(exits);
}

}  // namespace
}  // namespace tandem::mptest
