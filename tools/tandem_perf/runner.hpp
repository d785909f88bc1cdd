#pragma once
// Runs one collective at one size: warmup, timed back-to-back iterations (out-of-place, then
// in-place), per-iteration times gathered once at the end, and one checked iteration.

#include "options.hpp"
#include "tools_api/device.hpp"

#include <tandem/communicator.hpp>

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace tandem::tools::perf {

/// One variant (out-of-place or in-place) of one row.
struct Measurement {
  bool valid = false;  ///< false: not applicable (e.g. in-place alltoall)
  double mean_us = 0;  ///< mean over iterations of the slowest rank's time
  double p50_us = 0;   ///< median of the same
  double p99_us = 0;   ///< 99th percentile of the same (nearest rank)
  double max_us = 0;   ///< the slowest iteration
  /// The slowest rank's whole timed loop over the iterations: throughput, which a rank that
  /// runs ahead (a broadcast root) does not charge to single iterations. <= mean_us.
  double loop_us = 0;
  /// The slowest rank's time of each timed iteration, in the order they ran (--json's
  /// time_us_calls): where a mean above the median comes from, the first calls or a burst.
  std::vector<double> calls_us;
  double algbw = 0;  ///< GB/s (1e9 bytes/s) of the row's size at the mean time
  double busbw = 0;
  bool checked = false;   ///< false with --no-check
  std::size_t wrong = 0;  ///< summed over ranks
  std::string algorithm;  ///< the one that ran the timed iterations (Communicator::last_algorithm)
};

struct Row {
  std::size_t bytes = 0;  ///< the size column: whole buffer, rounded down to whole elements
  std::size_t count = 0;  ///< elements in that buffer
  DataType dtype = DataType::f32;
  ReduceOp op = ReduceOp::sum;
  int root = -1;          ///< -1 for collectives without a root
  std::string algorithm;  ///< what ran; "oop|in-place" when the two differ
  Measurement out_of_place, in_place;
};

/// busbw / algbw for `b` on `world` ranks.
double bus_factor(Bench b, int world) noexcept;

/// The collective a bench runs (sendrecv: send).
CollectiveKind kind_of(Bench b) noexcept;

class Runner {
 public:
  /// Allocates (and touches) buffers for the largest size.
  Runner(Communicator& comm, const PerfOptions& options);

  /// Measures one size; nullopt-like empty row (count 0) when the size holds no element per
  /// rank. Throws tandem::Error when a collective fails.
  Row run(std::size_t size, DataType dtype, ReduceOp op);
  /// The bytes of the call run() makes for `size` (0: no element per rank), as the
  /// selector counts them.
  std::size_t call_bytes(std::size_t size, DataType dtype) const;
  /// The algorithm the next runs force ("": the selector's choice).
  void set_algorithm(std::string name);
  /// With --device: the device-to-device copy bandwidth (GB/s) of the largest size, measured
  /// by rank 0 while the others wait (collective); 0 on host memory.
  double device_copy_gbps();

 private:
  struct Shape {
    std::size_t per = 0;  ///< elements per rank (per block for allgather/reduce_scatter/alltoall)
    std::size_t in = 0, out = 0;  ///< elements of the input and output views
  };
  struct Views {
    BufferView in, out;
  };
  struct FreeDeleter {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };

  Shape shape(std::size_t size, DataType t) const;
  Views views(const Shape& s, DataType t, bool in_place) const;
  void run_once(const Views& v, ReduceOp op);
  /// run_once for the checked iteration: on a device, the host mirrors go up before and
  /// come back after.
  void run_checked(const Views& v, ReduceOp op);
  /// The host memory that mirrors `v` (v itself for host buffers).
  BufferView host_view(const BufferView& v) const;
  void zero(std::byte* p, std::size_t bytes);
  Measurement measure(const Shape& s, DataType t, ReduceOp op, bool in_place,
                      std::size_t row_bytes);
  std::size_t check(const Shape& s, DataType t, ReduceOp op, bool in_place);

  Communicator& comm_;
  const PerfOptions& options_;
  std::string algorithm_;
  CallOptions call_;
  int rank_, world_;
  std::size_t capacity_ = 0;
  std::unique_ptr<std::byte[], FreeDeleter> a_own_, b_own_;
  SharedBuffer a_reg_, b_reg_;  ///< --registered
  std::byte* a_ = nullptr;
  std::byte* b_ = nullptr;
  /// --device: the device memory behind a_ and b_, and their host mirrors for the checks.
  std::unique_ptr<tools_api::DeviceMemory> device_;
  std::unique_ptr<std::byte[], FreeDeleter> a_host_, b_host_;
};

}  // namespace tandem::tools::perf
