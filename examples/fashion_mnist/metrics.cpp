#include "metrics.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>

namespace fashion_mnist {
namespace {

using tandem::ErrorCode;

bool is_json(const std::filesystem::path& p) {
  return p.extension() == ".json";
}

nlohmann::ordered_json to_json(const MetricsRow& r) {
  return {{"kind", r.kind},
          {"epoch", r.epoch},
          {"step", r.step},
          {"train_loss", r.train_loss},
          {"train_accuracy", r.train_accuracy},
          {"test_loss", r.test_loss},
          {"test_accuracy", r.test_accuracy},
          {"ms_per_step", r.ms_per_step},
          {"images_per_s", r.images_per_s},
          {"lr", r.lr}};
}

MetricsRow from_json(const nlohmann::json& j) {
  MetricsRow r;
  r.kind = j.at("kind").get<std::string>();
  r.epoch = j.at("epoch").get<std::uint64_t>();
  r.step = j.at("step").get<std::uint64_t>();
  r.train_loss = j.at("train_loss").get<double>();
  r.train_accuracy = j.at("train_accuracy").get<double>();
  r.test_loss = j.at("test_loss").get<double>();
  r.test_accuracy = j.at("test_accuracy").get<double>();
  r.ms_per_step = j.at("ms_per_step").get<double>();
  r.images_per_s = j.at("images_per_s").get<double>();
  r.lr = j.at("lr").get<double>();
  return r;
}

MetricsRow from_csv(const std::string& line) {
  std::vector<std::string> f;
  std::stringstream in(line);
  for (std::string cell; std::getline(in, cell, ',');) f.push_back(cell);
  if (f.size() != 10) throw std::invalid_argument("expected 10 fields");
  MetricsRow r;
  r.kind = f[0];
  r.epoch = std::stoull(f[1]);
  r.step = std::stoull(f[2]);
  r.train_loss = std::stod(f[3]);
  r.train_accuracy = std::stod(f[4]);
  r.test_loss = std::stod(f[5]);
  r.test_accuracy = std::stod(f[6]);
  r.ms_per_step = std::stod(f[7]);
  r.images_per_s = std::stod(f[8]);
  r.lr = std::stod(f[9]);
  return r;
}

}  // namespace

std::string metrics_csv_header() {
  return "kind,epoch,step,train_loss,train_accuracy,test_loss,test_accuracy,ms_per_step,"
         "images_per_s,lr";
}

std::string to_csv(const MetricsRow& r) {
  return fmt::format("{},{},{},{:.6f},{:.4f},{:.6f},{:.4f},{:.4f},{:.2f},{:.8g}", r.kind, r.epoch,
                     r.step, r.train_loss, r.train_accuracy, r.test_loss, r.test_accuracy,
                     r.ms_per_step, r.images_per_s, r.lr);
}

std::vector<MetricsRow> read_metrics(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) {
    TANDEM_THROW(ErrorCode::Io, "cannot read the metrics file {}: {}", path.string(),
                 std::strerror(errno));
  }
  std::stringstream text;
  text << in.rdbuf();
  std::vector<MetricsRow> rows;
  try {
    if (is_json(path)) {
      for (const auto& j : nlohmann::json::parse(text.str())) rows.push_back(from_json(j));
    } else {
      std::string line;
      std::getline(text, line);
      if (line != metrics_csv_header()) throw std::invalid_argument("unexpected header");
      while (std::getline(text, line)) {
        if (!line.empty()) rows.push_back(from_csv(line));
      }
    }
  } catch (const std::exception& e) {
    TANDEM_THROW(ErrorCode::Io,
                 "{} is not a metrics file of this program ({}): remove it or "
                 "choose another log.metrics",
                 path.string(), e.what());
  }
  return rows;
}

MetricsWriter::MetricsWriter(std::filesystem::path path,
                             std::optional<std::uint64_t> resumed_epochs)
    : path_(std::move(path)), json_(is_json(path_)) {
  std::error_code ec;
  if (resumed_epochs && std::filesystem::exists(path_, ec)) {
    for (MetricsRow& r : read_metrics(path_)) {
      if (r.kind == "epoch" && r.epoch <= *resumed_epochs) rows_.push_back(std::move(r));
    }
  }
}

void MetricsWriter::write(const MetricsRow& row) {
  rows_.push_back(row);
  std::string text;
  if (json_) {
    nlohmann::ordered_json all = nlohmann::ordered_json::array();
    for (const MetricsRow& r : rows_) all.push_back(to_json(r));
    text = all.dump(2) + "\n";
  } else {
    text = metrics_csv_header() + "\n";
    for (const MetricsRow& r : rows_) text += to_csv(r) + "\n";
  }
  if (path_.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(path_.parent_path(), ec);
  }
  auto tmp = path_;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      TANDEM_THROW(ErrorCode::Io, "cannot write the metrics file {}: {} (check log.metrics)",
                   tmp.string(), std::strerror(errno));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path_, ec);
  if (ec) {
    TANDEM_THROW(ErrorCode::Io, "cannot rename {} to {}: {}", tmp.string(), path_.string(),
                 ec.message());
  }
}

}  // namespace fashion_mnist
