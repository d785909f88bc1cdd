// The checker of tandem-perf: its inputs and expected results are exact in every dtype, and
// it counts a wrong element. (tandem-perf is a program, not a library: its one source file
// with this logic is compiled into the test directly.)
#include "../../tools/tandem_perf/pattern.cpp"

#include <gtest/gtest.h>

#include <vector>

namespace tandem::tools::perf {
namespace {

// The reduction computed in the dtype itself, element by element, as a rank would.
double reduce_in_dtype(ReduceOp op, DataType t, int world, std::size_t i) {
  std::vector<std::byte> cell(8);
  const BufferView acc = BufferView::raw(cell.data(), 1, t);
  store(acc, 0, reduce_input(op, t, 0, world, i));
  for (int r = 1; r < world; ++r) {
    const double a = load(acc, 0), b = reduce_input(op, t, r, world, i);
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg:
        store(acc, 0, a + b);
        break;
      case ReduceOp::prod:
        store(acc, 0, a * b);
        break;
      case ReduceOp::min:
        store(acc, 0, std::min(a, b));
        break;
      case ReduceOp::max:
        store(acc, 0, std::max(a, b));
        break;
      case ReduceOp::band:  // not in kAllReduceOps
      case ReduceOp::bor:
      case ReduceOp::bxor:
        break;
    }
  }
  double v = load(acc, 0);
  if (op == ReduceOp::avg) v /= world;
  return v;
}

TEST(PerfPattern, InputsAndResultsAreExactInEveryDtype) {
  for (DataType t : kAllDataTypes) {
    for (ReduceOp op : kAllReduceOps) {
      for (int world : {1, 2, 3, 4, 7, 8, 63}) {
        for (std::size_t i = 0; i < 200; ++i) {
          std::vector<std::byte> cell(8);
          const BufferView b = BufferView::raw(cell.data(), 1, t);
          for (int r = 0; r < world; ++r) {
            const double v = reduce_input(op, t, r, world, i);
            store(b, 0, v);
            ASSERT_EQ(load(b, 0), v) << to_string(t) << " cannot hold input " << v;
          }
          const double want = reduce_expected(op, t, world, i);
          ASSERT_EQ(reduce_in_dtype(op, t, world, i), want)
              << to_string(t) << " " << to_string(op) << " world " << world << " i " << i;
          store(b, 0, want);
          ASSERT_EQ(load(b, 0), want);
        }
      }
    }
  }
}

TEST(PerfPattern, PayloadAndSentinelFitEveryDtype) {
  for (DataType t : kAllDataTypes) {
    std::vector<std::byte> cell(8);
    const BufferView b = BufferView::raw(cell.data(), 1, t);
    for (std::size_t src = 0; src < 300; ++src) {
      const double v = data_value(src, src * 13);
      store(b, 0, v);
      ASSERT_EQ(load(b, 0), v) << to_string(t);
      ASSERT_NE(v, kSentinel);
    }
    store(b, 0, kSentinel);
    EXPECT_EQ(load(b, 0), kSentinel) << to_string(t);
  }
}

TEST(PerfPattern, CountWrongFindsEachBadElement) {
  std::vector<float> v(100);
  const BufferView b = BufferView::of(std::span<float>(v));
  const auto want = [](std::size_t g) { return data_value(3, g); };
  fill(b, 5, want);
  EXPECT_EQ(count_wrong(b, 5, want, false), 0u);
  v[17] += 1;
  v[99] = kSentinel;
  EXPECT_EQ(count_wrong(b, 5, want, false), 2u);
  EXPECT_GT(count_wrong(b, 6, want, false), 90u) << "checked against the wrong offset";
}

}  // namespace
}  // namespace tandem::tools::perf
