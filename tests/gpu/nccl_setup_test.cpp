// What the CUDA backend does without a device, tested on every machine with the real NCCL
// library: the mapping of tandem's types and operations, NCCL's results as tandem errors, and
// the unique id's exchange through a real store (ncclGetUniqueId needs no GPU).

// Without NCCL in the build (CUDA IPC only) there is nothing of NCCL's to test.
#ifdef TANDEM_HAVE_NCCL

#include "gpu/cuda.hpp"
#include "gpu/nccl/types.hpp"
#include "gpu/nccl/unique_id.hpp"

#include <tandem/communicator.hpp>
#include <tandem/error.hpp>
#include <tandem/store.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace tandem::gpu {
namespace {

using namespace std::chrono_literals;

bool has(const std::string& s, std::string_view what) {
  return s.find(what) != std::string::npos;
}

TEST(NcclTypes, EveryDtypeHasItsOwnNcclType) {
  std::set<int> seen;
  for (DataType t : kAllDataTypes) {
    const ncclDataType_t n = nccl_type(t);
    EXPECT_LT(static_cast<int>(n), static_cast<int>(ncclNumTypes)) << to_string(t);
    EXPECT_TRUE(seen.insert(static_cast<int>(n)).second) << to_string(t) << " shares a type";
  }
  EXPECT_EQ(nccl_type(DataType::bf16), ncclBfloat16);
  EXPECT_EQ(nccl_type(DataType::u8), ncclUint8);
  EXPECT_EQ(nccl_type(DataType::i64), ncclInt64);
}

TEST(NcclTypes, AverageOfIntegersIsASumThenADivision) {
  for (DataType t : kAllDataTypes) {
    const bool floating = is_floating(t);
    EXPECT_EQ(nccl_op(ReduceOp::avg, t), floating ? ncclAvg : ncclSum) << to_string(t);
    EXPECT_EQ(divides_after(ReduceOp::avg, t), !floating) << to_string(t);
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max})
      EXPECT_FALSE(divides_after(op, t));
  }
  EXPECT_EQ(nccl_op(ReduceOp::sum, DataType::f32), ncclSum);
  EXPECT_EQ(nccl_op(ReduceOp::prod, DataType::f32), ncclProd);
  EXPECT_EQ(nccl_op(ReduceOp::min, DataType::i8), ncclMin);
  EXPECT_EQ(nccl_op(ReduceOp::max, DataType::f16), ncclMax);
}

TEST(NcclErrors, EachResultBecomesACodeWithAdvice) {
  const std::pair<ncclResult_t, ErrorCode> expected[] = {
      {ncclUnhandledCudaError, ErrorCode::Io},
      {ncclSystemError, ErrorCode::Io},
      {ncclInternalError, ErrorCode::Internal},
      {ncclInvalidArgument, ErrorCode::InvalidArgument},
      {ncclInvalidUsage, ErrorCode::InvalidArgument},
      {ncclRemoteError, ErrorCode::PeerLost},
  };
  for (const auto& [result, code] : expected) {
    const Error e = nccl_error(result, "NCCL allreduce #3 (f32 x 8 on cuda:0)", "detail here");
    EXPECT_EQ(e.code(), code) << static_cast<int>(result);
    const std::string& m = e.message();
    EXPECT_TRUE(has(m, "NCCL allreduce #3 (f32 x 8 on cuda:0)")) << m;
    EXPECT_TRUE(has(m, ncclGetErrorString(result))) << m;  // NCCL's own words
    EXPECT_TRUE(has(m, "detail here")) << m;
    EXPECT_TRUE(has(m, "NCCL_DEBUG") || has(m, "other ranks")) << m;
  }
  EXPECT_TRUE(has(nccl_error(ncclRemoteError, "x").message(), "exit status"));
  EXPECT_EQ(nccl_version_text(22809), "2.28.9");
  EXPECT_EQ(nccl_version_text(21903), "2.19.3");
}

TEST(UniqueId, TextRoundTripsAndGarbageIsRefused) {
  ncclUniqueId id{};
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  const std::string text = to_text(id);
  EXPECT_EQ(text.size(), 2 * sizeof id.internal);
  const ncclUniqueId back = unique_id_from_text(text);
  EXPECT_EQ(std::memcmp(back.internal, id.internal, sizeof id.internal), 0);
  for (const std::string& bad :
       {std::string("12ab"), text.substr(1) + "g", std::string(text.size(), 'Z')}) {
    try {
      unique_id_from_text(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    }
  }
}

TEST(UniqueId, EveryRankGetsRankZerosIdThroughTheStore) {
  store::TcpStoreServerOptions so;
  so.token = "t";
  store::TcpStoreServer server(so);
  constexpr int kRanks = 4;
  std::vector<std::future<std::string>> ids;
  for (int r = kRanks - 1; r >= 0; --r) {  // rank 0 last: the others must wait for it
    ids.push_back(std::async(std::launch::async, [&, r] {
      store::TcpStoreOptions o;
      o.token = "t";
      store::TcpStore client("127.0.0.1", server.port(), o);
      return to_text(exchange_unique_id(client, "comm/nccl/id", r, deadline_in(30s), [] {}));
    }));
  }
  std::set<std::string> distinct;
  for (auto& f : ids) distinct.insert(f.get());
  ASSERT_EQ(distinct.size(), 1u);
  EXPECT_NE(*distinct.begin(), std::string(2 * sizeof(ncclUniqueId{}.internal), '0'));
}

TEST(UniqueId, AMissingRankZeroIsATimeoutThatSaysWhatWasAwaited) {
  store::HashStore store;
  try {
    exchange_unique_id(store, "comm/nccl/id", 1, deadline_in(50ms), {});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Timeout);
    EXPECT_TRUE(has(e.message(), "NCCL unique id")) << e.message();
    EXPECT_TRUE(has(e.message(), "ranks 0")) << e.message();
  }
}

TEST(UniqueId, ALostPeerEndsTheWait) {
  store::HashStore store;
  int asked = 0;
  try {
    exchange_unique_id(store, "comm/nccl/id", 2, deadline_in(60s), [&] {
      ++asked;
      TANDEM_THROW(ErrorCode::PeerLost, "rank 0 (host h, pid 1) died");
    });
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::PeerLost);
    EXPECT_TRUE(has(e.message(), "rank 0")) << e.message();
  }
  EXPECT_EQ(asked, 1);
}

TEST(Cuda, DeviceCountSaysWhyThereIsNone) {
  std::string why;
  const int n = device_count(&why);
  if (n > 0) {
    EXPECT_FALSE(describe_device(0).empty());
    return;
  }
  EXPECT_FALSE(why.empty());
  try {
    use_device(Device::cuda(0));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_TRUE(has(e.message(), "cuda:0")) << e.message();
    EXPECT_TRUE(has(e.message(), why)) << e.message();
  }
}

TEST(NcclBackend, ACudaBufferWithoutADeviceSaysWhy) {
  std::string why;
  if (device_count(&why) > 0) GTEST_SKIP() << "a CUDA device is present: GpuOneRank covers it";
  auto comm = Communicator::create(std::make_shared<store::HashStore>(), 0, 1);
  float x[4] = {1, 2, 3, 4};
  BufferView gpu = BufferView::raw(x, 4, DataType::f32);
  gpu.device = Device::cuda(0);
  try {
    comm->allreduce(gpu, ReduceOp::sum);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    EXPECT_TRUE(has(e.message(), "allreduce #0")) << e.message();
    EXPECT_TRUE(has(e.message(), "cuda:0 is not a usable CUDA device")) << e.message();
    EXPECT_TRUE(has(e.message(), why)) << e.message();
  }
}

}  // namespace
}  // namespace tandem::gpu

#endif  // TANDEM_HAVE_NCCL
