// Fashion-MNIST trained data-parallel with tandem's DistributedDataParallel for LibTorch.
//
//   build/bin/tandemrun --nproc-per-node 2 build/bin/fashion_mnist
//   build/bin/fashion_mnist -o training.epochs=1        (one process: world size 1)
//
// The configuration is config.yaml (copied next to the executable as fashion_mnist.yaml, and
// compiled in as a fallback); --config FILE replaces it and -o section.key=value overrides
// single keys.
#include "config.hpp"
#include "setup.hpp"
#include "trainer.hpp"

#include <tandem/communicator.hpp>
#include <tandem/error.hpp>
#include <tandem/settings.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace fashion_mnist {
extern const std::string_view kDefaultConfigYaml;  // config.yaml, compiled in
}

namespace {

std::filesystem::path default_config_path() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  auto path = exe.parent_path() / (exe.stem().string() + ".yaml");
  return std::filesystem::exists(path, ec) ? path : std::filesystem::path();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Fashion-MNIST trained data-parallel with tandem (DistributedDataParallel for LibTorch).\n"
      "Run it under a launcher for several ranks:\n"
      "  tandemrun --nproc-per-node 2 fashion_mnist [options]\n"
      "or alone for one. Every configuration key is documented in config.yaml.",
      "fashion_mnist"};
  std::string config_file;
  std::vector<std::string> assignments;
  std::string data_dir;
  std::string metrics;
  std::string device;
  bool print_config = false;
  app.add_option("-c,--config", config_file,
                 "YAML configuration (default: fashion_mnist.yaml next to the executable, "
                 "else the built-in copy of config.yaml)")
      ->type_name("FILE");
  app.add_option("-o,--override", assignments,
                 "Override one key, typed like it: -o training.epochs=3 (repeatable)")
      ->allow_extra_args(false)
      ->type_name("KEY=VALUE");
  app.add_option("--data", data_dir, "Fashion-MNIST directory (data.dir)")->type_name("DIR");
  app.add_option("--device", device, "cpu or cuda (training.device)")->type_name("DEVICE");
  app.add_option("--metrics", metrics, "Metrics file, .csv or .json (log.metrics)")
      ->type_name("FILE");
  app.add_flag("--print-config", print_config,
               "Print the effective configuration as YAML and exit");
  CLI11_PARSE(app, argc, argv);

  fashion_mnist::Config config;
  try {
    std::vector<fashion_mnist::Override> overrides;
    for (auto& a : assignments) overrides.push_back({a, "-o " + a});
    if (!data_dir.empty()) overrides.push_back({"data.dir=" + data_dir, "--data"});
    if (!metrics.empty()) overrides.push_back({"log.metrics=" + metrics, "--metrics"});
    if (!device.empty()) overrides.push_back({"training.device=" + device, "--device"});
    if (config_file.empty()) config_file = default_config_path().string();
    config = config_file.empty() ? fashion_mnist::parse_config(fashion_mnist::kDefaultConfigYaml,
                                                               "<built-in config.yaml>", overrides)
                                 : fashion_mnist::load_config(config_file, overrides);
    if (print_config) {
      std::fputs(fashion_mnist::to_yaml(config).c_str(), stdout);
      return 0;
    }
    fashion_mnist::check_data_dir(config);
  } catch (const tandem::Error& e) {
    // Every rank says it: a launcher may stop the others as soon as one rank exits.
    std::fprintf(stderr, "fashion_mnist: error: %s\n", e.message().c_str());
    return 2;
  }

  int rank = -1;
  try {
    std::shared_ptr<tandem::Communicator> comm;
    try {
      comm = tandem::Communicator::from_env();
    } catch (const tandem::Error& e) {
      // A replacement (TANDEM_JOIN=1) that the job ended before admitting has nothing to do.
      if (e.code() != tandem::ErrorCode::Aborted || !tandem::settings::get_bool("TANDEM_JOIN"))
        throw;
      std::printf("fashion_mnist: the job ended before this replacement joined it (%s)\n",
                  e.message().c_str());
      return 0;
    }
    rank = comm->rank();
    fashion_mnist::Setup setup;
    try {
      // A replacement joins a world that may have changed its batch as the survivors did.
      setup = comm->joined() ? fashion_mnist::resolve_setup_after_loss(config, comm->size())
                             : fashion_mnist::resolve_setup(config, comm->size());
    } catch (const tandem::Error& e) {
      std::fprintf(stderr, "fashion_mnist: error: %s\n", e.message().c_str());
      return 2;
    }
    fashion_mnist::train(config, setup, comm);
    return 0;
  } catch (const tandem::Error& e) {
    std::fprintf(stderr, "fashion_mnist: rank %d: error: %s\n", rank, e.message().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fashion_mnist: rank %d: error: %s\n", rank, e.what());
    return 1;
  }
}
