// Reduction kernels against memcpy of the same size, on one core.
//
//   tandem-microbench --benchmark_filter=Reduce
//
// Names ending in /nostream turn the streaming stores off (the threshold at SIZE_MAX), so one
// binary compares both at every size; the others run with the default threshold (the
// last-level cache; out-of-place outputs only). ReduceTiny: counts under 8 elements and 32
// bytes take the scalar path without SIMD dispatch (f16 excepted).
//
// bytes_per_second counts one buffer's size per call (the "useful" bytes, as algbw does);
// the "traffic" counter counts every byte the call moves through memory: a reduce reads two
// buffers and writes one (3x), an in-place reduce reads two and writes one of them (3x),
// memcpy reads one and writes one (2x).

#include "core/reduce.hpp"

#include <tandem/types.hpp>

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

namespace {

using tandem::DataType;
using tandem::ReduceOp;

struct FreeDeleter {
  void operator()(void* p) const noexcept { std::free(p); }
};
using Buffer = std::unique_ptr<std::byte, FreeDeleter>;

// Page-aligned, touched (so first-touch page faults are not timed), filled with small values
// that keep floating sums finite.
Buffer make_buffer(std::size_t bytes, std::uint8_t fill) {
  const std::size_t rounded = (bytes + 4095) / 4096 * 4096;
  Buffer b(static_cast<std::byte*>(std::aligned_alloc(4096, rounded)));
  if (!b) std::abort();
  std::memset(b.get(), fill, rounded);
  return b;
}

void set_counters(benchmark::State& state, std::size_t bytes, double traffic_factor) {
  const auto iters = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(bytes));
  state.counters["traffic"] =
      benchmark::Counter(iters * static_cast<double>(bytes) * traffic_factor,
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1024);
}

// Sets the streaming threshold for one benchmark and restores the default after it.
class StreamMode {
 public:
  explicit StreamMode(bool on) {
    if (!on) tandem::core::set_stream_threshold(SIZE_MAX);
  }
  ~StreamMode() { tandem::core::set_stream_threshold(0); }
  StreamMode(const StreamMode&) = delete;
  StreamMode& operator=(const StreamMode&) = delete;
};

void BM_ReduceSum(benchmark::State& state, DataType dtype, bool stream) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const std::size_t count = bytes / tandem::dtype_size(dtype);
  const Buffer a = make_buffer(bytes, 0x01), b = make_buffer(bytes, 0x01),
               d = make_buffer(bytes, 0);
  const StreamMode mode(stream);
  for (auto _ : state) {
    tandem::core::reduce(d.get(), a.get(), b.get(), count, dtype, ReduceOp::sum);
    benchmark::DoNotOptimize(d.get());
    benchmark::ClobberMemory();
  }
  set_counters(state, bytes, 3.0);
  state.SetLabel(tandem::core::kernel_target());
}

void BM_ReduceSumInPlace(benchmark::State& state, DataType dtype, bool stream) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const std::size_t count = bytes / tandem::dtype_size(dtype);
  const Buffer a = make_buffer(bytes, 0), b = make_buffer(bytes, 0);
  const StreamMode mode(stream);
  for (auto _ : state) {
    tandem::core::reduce(a.get(), a.get(), b.get(), count, dtype, ReduceOp::sum);
    benchmark::DoNotOptimize(a.get());
    benchmark::ClobberMemory();
  }
  set_counters(state, bytes, 3.0);
  state.SetLabel(tandem::core::kernel_target());
}

// The last step of avg: every element divided by the world size, in place.
void BM_Divide(benchmark::State& state, DataType dtype) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const std::size_t count = bytes / tandem::dtype_size(dtype);
  const Buffer a = make_buffer(bytes, 0x11);
  for (auto _ : state) {
    tandem::core::divide(a.get(), count, dtype, 3);
    benchmark::DoNotOptimize(a.get());
    benchmark::ClobberMemory();
  }
  set_counters(state, bytes, 2.0);
  state.SetLabel(tandem::core::kernel_target());
}

void BM_Memcpy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const Buffer src = make_buffer(bytes, 0x01), dst = make_buffer(bytes, 0);
  for (auto _ : state) {
    std::memcpy(dst.get(), src.get(), bytes);
    benchmark::DoNotOptimize(dst.get());
    benchmark::ClobberMemory();
  }
  set_counters(state, bytes, 2.0);
}

// 8 and 16 bytes: the scalar path (an 8-byte allreduce reduces two floats); 64 KiB to 256 MiB:
// from inside L2 to far beyond the 32 MiB last-level cache, where streaming stores pay.
void tiny(benchmark::internal::Benchmark* b) {
  b->Arg(8)->Arg(16)->Arg(64);
}
void sizes(benchmark::internal::Benchmark* b) {
  b->Arg(4 << 10)->Arg(64 << 10)->Arg(1 << 20)->Arg(4 << 20)->Arg(16 << 20);
  b->Arg(32 << 20)->Arg(64 << 20)->Arg(256 << 20);
}

int register_all() {
  for (DataType t : tandem::kAllDataTypes) {
    const std::string name(tandem::to_string(t));
    benchmark::RegisterBenchmark(("ReduceTiny/" + name).c_str(), BM_ReduceSum, t, true)
        ->Apply(tiny);
    benchmark::RegisterBenchmark(("ReduceSum/" + name).c_str(), BM_ReduceSum, t, true)
        ->Apply(sizes);
    benchmark::RegisterBenchmark(("ReduceSum/" + name + "/nostream").c_str(), BM_ReduceSum, t,
                                 false)
        ->Apply(sizes);
  }
  for (DataType t : {DataType::f32, DataType::bf16}) {
    const std::string name(tandem::to_string(t));
    benchmark::RegisterBenchmark(("ReduceSumInPlace/" + name).c_str(), BM_ReduceSumInPlace, t, true)
        ->Apply(sizes);
    benchmark::RegisterBenchmark(("ReduceSumInPlace/" + name + "/nostream").c_str(),
                                 BM_ReduceSumInPlace, t, false)
        ->Apply(sizes);
  }
  for (DataType t : {DataType::f32, DataType::i32, DataType::i64})
    benchmark::RegisterBenchmark(("Divide/" + std::string(tandem::to_string(t))).c_str(), BM_Divide,
                                 t)
        ->Arg(64 << 10);
  benchmark::RegisterBenchmark("Memcpy", BM_Memcpy)->Apply(sizes);
  return 0;
}

[[maybe_unused]] const int registered = register_all();

}  // namespace

BENCHMARK_MAIN();
