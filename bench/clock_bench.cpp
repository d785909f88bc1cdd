// What a clock read costs: the precise monotonic clock against the coarse one the calls'
// deadlines are counted from (core/coarse_clock.hpp).
//
//   tandem-microbench --benchmark_filter=Clock

#include "core/coarse_clock.hpp"

#include <tandem/types.hpp>

#include <benchmark/benchmark.h>

namespace {

void BM_ClockSteadyNow(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(tandem::Clock::now());
}
BENCHMARK(BM_ClockSteadyNow);

void BM_ClockCoarseNow(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(tandem::core::coarse_now());
}
BENCHMARK(BM_ClockCoarseNow);

}  // namespace
