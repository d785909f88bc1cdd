#pragma once
// Per-epoch and final metrics, written by rank 0 to a CSV or JSON file (by extension). The
// whole file is rewritten atomically after each row (temporary file, then rename), so a
// reader never sees half a row and a crash keeps the rows written so far.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace fashion_mnist {

struct MetricsRow {
  std::string kind = "epoch";  // "epoch" or "final"
  std::uint64_t epoch = 0;     // 1-based; for "final", the epochs trained
  std::uint64_t step = 0;      // optimizer steps done
  double train_loss = 0;
  double train_accuracy = 0;  // percent
  double test_loss = 0;
  double test_accuracy = 0;  // percent
  // Mean over the steps of this run so far, the first 20 left out; images/s is global.
  double ms_per_step = 0;
  double images_per_s = 0;
  double lr = 0;  // of the last step

  bool operator==(const MetricsRow&) const = default;
};

/// The CSV header (and the JSON field names, in this order).
std::string metrics_csv_header();
std::string to_csv(const MetricsRow& row);
/// Parses a file written by MetricsWriter (either format); throws tandem::Error(Io) naming
/// the file when it is not one.
std::vector<MetricsRow> read_metrics(const std::filesystem::path& path);

class MetricsWriter {
 public:
  /// `path` ends in .csv or .json. With `resumed_epochs`, the epoch rows of an earlier run in
  /// the file for its first `resumed_epochs` epochs are kept (a resumed run continues the file,
  /// at whatever world size); otherwise it starts empty.
  explicit MetricsWriter(std::filesystem::path path,
                         std::optional<std::uint64_t> resumed_epochs = std::nullopt);
  /// Appends a row and rewrites the file; throws tandem::Error(Io) naming it on failure.
  void write(const MetricsRow& row);
  const std::vector<MetricsRow>& rows() const noexcept { return rows_; }

 private:
  std::filesystem::path path_;
  bool json_;
  std::vector<MetricsRow> rows_;
};

}  // namespace fashion_mnist
