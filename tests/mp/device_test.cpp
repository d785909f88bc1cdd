// A collective on CUDA memory goes to the device backend, which libtandem loads at the first
// such call (comm/device/backend.hpp): what a user sees when it cannot be loaded, and that a
// failed load poisons nothing but that call's communicator.

#include "support/scoped_env.hpp"

#include <tandem/communicator.hpp>
#include <tandem/error.hpp>
#include <tandem/store.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace tandem {
namespace {

TEST(DeviceBackend, AMissingLibraryIsNamedWithWhatToDo) {
  testing::ScopedEnv library("TANDEM_CUDA_LIBRARY", "/nonexistent/libtandem_cuda.so");
  auto comm = Communicator::create(std::make_shared<store::HashStore>(), 0, 1);
  float x[4] = {1, 2, 3, 4};
  BufferView gpu = BufferView::raw(x, 4, DataType::f32);
  gpu.device = Device::cuda(0);
  try {
    comm->allreduce(gpu, ReduceOp::sum);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    const std::string& m = e.message();
    for (const char* needle : {"allreduce", "cuda:0", "cannot load /nonexistent/libtandem_cuda.so",
                               "nvcc", "TANDEM_CUDA_LIBRARY", "host memory"})
      EXPECT_NE(m.find(needle), std::string::npos) << needle << " in: " << m;
  }
  // Host collectives of another communicator are unaffected.
  auto other = Communicator::create(std::make_shared<store::HashStore>(), 0, 1);
  other->allreduce(BufferView::raw(x, 4, DataType::f32), ReduceOp::sum);
  EXPECT_EQ(x[3], 4.0f);
}

}  // namespace
}  // namespace tandem
