// The device reduction and division kernels against tests/mp's reference (plain loops in
// double): every dtype and op, awkward sizes, pointers 16-byte aligned (vector path) and not,
// in place and out, NaN propagation, integer wrap-around. Skipped without a GPU.

#include "gpu/cuda.hpp"
#include "gpu/kernels.hpp"
#include "mp/mp_util.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

namespace tandem::gpu {
namespace {

using mptest::Buffer;

#define REQUIRE_GPU()                                                       \
  do {                                                                      \
    std::string why;                                                        \
    if (device_count(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why; \
  } while (0)

// Device memory holding `count` elements at `offset` elements past a 256-byte boundary.
struct Placed {
  Placed(DataType t, std::size_t count, std::size_t offset)
      : memory((count + offset) * dtype_size(t) + 256),
        data(static_cast<std::byte*>(memory.get()) + offset * dtype_size(t)),
        bytes(count * dtype_size(t)) {}
  void put(const Buffer& b) const {
    if (bytes > 0) check_cuda(cudaMemcpy(data, b.data(), bytes, cudaMemcpyHostToDevice), "put");
  }
  void get(Buffer& b) const {
    if (bytes > 0) check_cuda(cudaMemcpy(b.data(), data, bytes, cudaMemcpyDeviceToHost), "get");
  }
  DeviceMemory memory;
  std::byte* data;
  std::size_t bytes;
};

TEST(DeviceReduce, EveryDtypeOpSizeAndAlignmentMatchesTheReference) {
  REQUIRE_GPU();
  for (DataType t : kAllDataTypes)
    for (ReduceOp op : kAllReduceOps)
      for (std::size_t n : {0, 1, 7, 15, 16, 17, 1023, 65537})
        for (std::size_t offset : {0, 1}) {  // 1: not 16-byte aligned, element by element
          for (bool in_place : {false, true}) {
            SCOPED_TRACE(::testing::Message()
                         << to_string(t) << " " << to_string(op) << " x " << n << " offset "
                         << offset << (in_place ? " in place" : ""));
            Buffer a(t, n), b(t, n), got(t, n);
            for (std::size_t i = 0; i < n; ++i) {
              a.set(i, mptest::reduce_input(op, t, 0, i, 3));
              b.set(i, mptest::reduce_input(op, t, 1, i, 3));
            }
            Placed da(t, n, offset), db(t, n, offset), dd(t, n, offset);
            da.put(a);
            db.put(b);
            void* dst = in_place ? static_cast<void*>(da.data) : dd.data;
            reduce_on_device(dst, da.data, db.data, n, t, op, nullptr);
            check_cuda(cudaDeviceSynchronize(), "reduce");
            (in_place ? da : dd).get(got);
            // avg reduces as sum: the division is a separate kernel.
            const ReduceOp as = op == ReduceOp::avg ? ReduceOp::sum : op;
            for (std::size_t i = 0; i < n; ++i) {
              const double want = mptest::reduce_expected(as, t, 2, i, 3);
              ASSERT_EQ(got.get(i), want) << "element " << i;
            }
          }
        }
}

TEST(DeviceReduce, NaNPropagatesThroughMinAndMaxAndIntegersWrap) {
  REQUIRE_GPU();
  for (DataType t : {DataType::f32, DataType::f64, DataType::f16, DataType::bf16}) {
    Buffer a(t, 4), b(t, 4), got(t, 4);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (std::size_t i = 0; i < 4; ++i) {
      a.set(i, i == 1 ? nan : 1.0);
      b.set(i, i == 2 ? nan : 2.0);
    }
    for (ReduceOp op : {ReduceOp::min, ReduceOp::max}) {
      Placed da(t, 4, 0), db(t, 4, 0);
      da.put(a);
      db.put(b);
      reduce_on_device(da.data, da.data, db.data, 4, t, op, nullptr);
      check_cuda(cudaDeviceSynchronize(), "reduce");
      da.get(got);
      EXPECT_EQ(got.get(0), op == ReduceOp::min ? 1.0 : 2.0) << to_string(t);
      EXPECT_TRUE(std::isnan(got.get(1))) << to_string(t) << " " << to_string(op);
      EXPECT_TRUE(std::isnan(got.get(2))) << to_string(t) << " " << to_string(op);
    }
  }
  Buffer a(DataType::i8, 2), b(DataType::i8, 2), got(DataType::i8, 2);
  a.set(0, 127);
  b.set(0, 1);  // 127 + 1 wraps to -128
  a.set(1, -128);
  b.set(1, -1);  // -128 + -1 wraps to 127
  Placed da(DataType::i8, 2, 0), db(DataType::i8, 2, 0);
  da.put(a);
  db.put(b);
  reduce_on_device(da.data, da.data, db.data, 2, DataType::i8, ReduceOp::sum, nullptr);
  check_cuda(cudaDeviceSynchronize(), "reduce");
  da.get(got);
  EXPECT_EQ(got.get(0), -128);
  EXPECT_EQ(got.get(1), 127);
}

TEST(DeviceDivide, TruncatesIntegersAndRoundsHalvesOnce) {
  REQUIRE_GPU();
  for (DataType t : kAllDataTypes) {
    const std::size_t n = 1001;
    Buffer host(t, n), got(t, n);
    for (std::size_t i = 0; i < n; ++i)
      host.set(i, static_cast<double>(i % 50) - (t == DataType::u8 ? 0 : 25));
    Placed d(t, n, 1);
    d.put(host);
    divide_on_device(d.data, n, t, 3, nullptr);
    check_cuda(cudaDeviceSynchronize(), "divide");
    d.get(got);
    for (std::size_t i = 0; i < n; ++i) {
      const double v = host.get(i) / 3;
      if (is_floating(t))
        EXPECT_NEAR(got.get(i), v,
                    t == DataType::f16 || t == DataType::bf16 ? 0.02 * std::abs(v) + 1e-3 : 1e-6);
      else
        EXPECT_EQ(got.get(i), std::trunc(v)) << to_string(t) << " element " << i;
    }
  }
}

}  // namespace
}  // namespace tandem::gpu
