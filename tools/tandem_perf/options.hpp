#pragma once
// Command line of tandem-perf (the flags of nccl-tests where they exist).

#include <tandem/types.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace tandem::tools::perf {

/// What tandem-perf measures; sendrecv is a ring of send/recv pairs.
enum class Bench : std::uint8_t {
  allreduce,
  broadcast,
  reduce,
  allgather,
  reduce_scatter,
  alltoall,
  sendrecv,
  barrier,
};

std::string_view to_string(Bench b) noexcept;

struct PerfOptions {
  Bench bench = Bench::allreduce;
  std::size_t min_bytes = 8;
  std::size_t max_bytes = 64u << 20;
  double factor = 2;
  std::vector<DataType> dtypes{DataType::f32};
  std::vector<ReduceOp> ops{ReduceOp::sum};
  int root = 0;
  int iters = 20;
  int warmup = 5;
  std::string algorithm;  ///< empty: the selector's choice
  bool check = true;
  bool registered = false;  ///< buffers from Communicator::allocate (one-copy collectives)
  /// --device: "cpu", or "cuda" (the rank's local rank picks the GPU) / "cuda:N".
  std::string device = "cpu";
  std::string json_path;
  bool out_of_place = true;  ///< measure out of place (--tune: not for broadcast)
  bool in_place = true;      ///< also measure in place (where the collective has it)
  /// --tune: time every applicable algorithm per power-of-two size, write a tuning file.
  bool tune = false;
  bool collective_given = false;  ///< -c was given (--tune: only that collective)
  std::string tune_out = "tandem-tuning.json";
  double tune_margin = 0.03;  ///< a challenger must beat the default by more than this
};

struct ParseResult {
  std::optional<PerfOptions> options;
  int exit_code = 0;
};

/// Parses argv; only `print` ranks write help or errors (so N ranks do not print N copies).
ParseResult parse_command_line(int argc, char** argv, bool print);

/// Whether the collective takes a reduction op / a root.
bool has_op(Bench b) noexcept;
bool has_root(Bench b) noexcept;

}  // namespace tandem::tools::perf
