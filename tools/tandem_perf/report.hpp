#pragma once
// What tandem-perf prints (rank 0 only): nccl-tests' header, columns and final lines, and
// the optional JSON file.

#include "options.hpp"
#include "runner.hpp"

#include <tandem/communicator.hpp>

#include <string>
#include <vector>

namespace tandem::tools::perf {

class Report {
 public:
  /// Collective: every rank must construct it (it gathers each rank's pid and host).
  Report(Communicator& comm, const PerfOptions& options);

  void header() const;
  void row(const Row& r);
  /// With --device: the device-to-device copy bandwidth of `bytes`, printed with the footer.
  void set_device_copy(std::size_t bytes, double gbps) {
    copy_bytes_ = bytes;
    copy_gbps_ = gbps;
  }
  /// The closing lines; returns the number of wrong elements over all rows.
  std::size_t footer() const;
  /// Writes every row to `path` (rank 0). Throws Error(Io) naming the path.
  void write_json(const std::string& path) const;

 private:
  Communicator& comm_;
  const PerfOptions& options_;
  bool print_;
  std::size_t copy_bytes_ = 0;
  double copy_gbps_ = 0;
  std::vector<std::string> ranks_;  ///< "#  Rank  0 Pid 123 on host" lines
  std::vector<Row> rows_;
};

}  // namespace tandem::tools::perf
