// Communicator::set_timeout() reaches everything that waits on the communicator's behalf, not
// only its calls: the stall report names the new timeout, and the device backend (and the
// store it is given) read the new value, also when the backend was made before the change.
#include "comm/device/backend.hpp"
#include "mp_util.hpp"
#include "support/temp_dir.hpp"

#include <tandem/error.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace tandem::mptest {
namespace {

using namespace std::chrono_literals;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Waits for the stall warning in `log` (a condition, polled with a deadline), not for a time.
void wait_for_stall_warning(const std::string& log) {
  const auto deadline = Clock::now() + 30s;
  while (read_file(log).find("has not completed") == std::string::npos) {
    ASSERT_LT(Clock::now(), deadline) << "no stall warning in " << read_file(log);
    std::this_thread::sleep_for(20ms);
  }
}

// Rank 1 stays out of allreduce #0 until rank 0 has logged the stall; the warning must give
// the timeout set after setup (123 s), not the one the communicator was made with (60 s).
TEST(SetTimeout, StallWarningNamesTheNewTimeout) {
  tandem::testing::TempDir dir;
  const std::string log = dir.file("rank0.log");
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        if (ctx.rank == 0) {
          const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
          ASSERT_GE(fd, 0);
          ::dup2(fd, STDERR_FILENO);
          ::close(fd);
        }
        auto comm = connect(ctx);
        ASSERT_EQ(comm->timeout(), 60s);
        comm->set_timeout(123s);
        if (ctx.rank == 1) wait_for_stall_warning(log);
        std::vector<float> v(16, 1.0f);
        comm->allreduce(BufferView::of(std::span<float>(v)), ReduceOp::sum);
        EXPECT_EQ(v[0], 2.0f);
        if (ctx.rank != 0) return;
        const std::string text = read_file(log);
        EXPECT_NE(text.find("It fails at TANDEM_TIMEOUT (123 s after it started)"),
                  std::string::npos)
            << text;
      },
      run_options("shm", {"TANDEM_TIMEOUT=60", "TANDEM_STALL_WARN=0.3"}));
  testing::expect_all_ok(exits);
}

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
