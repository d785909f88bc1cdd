// The Fashion-MNIST example's configuration: YAML text through parse_config, as the job
// reads its config file, plus `-o` overrides taken from the input's last lines. Any
// malformed text must give tandem::Error (InvalidArgument), never crash; a configuration
// that parses must survive its own YAML dump (to_yaml, stored in checkpoints).

#include "config.hpp"

#include <tandem/error.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  // Everything after a line "--" is overrides, one per line.
  std::vector<fashion_mnist::Override> overrides;
  if (const auto cut = text.find("\n--\n"); cut != std::string_view::npos) {
    std::string_view rest = text.substr(cut + 4);
    text = text.substr(0, cut);
    while (!rest.empty()) {
      const auto nl = rest.find('\n');
      overrides.push_back({std::string(rest.substr(0, nl)), "-o"});
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    }
  }
  fashion_mnist::Config config;
  try {
    config = fashion_mnist::parse_config(text, "fuzz.yaml", overrides);
  } catch (const tandem::Error&) {
    return 0;  // rejected, as it should be; anything else escapes and is reported
  }
  // What the job writes into a checkpoint must parse back to the same values.
  const std::string dumped = fashion_mnist::to_yaml(config);
  const auto again = fashion_mnist::parse_config(dumped, "dump.yaml");
  if (const std::string twice = fashion_mnist::to_yaml(again); twice != dumped) {
    std::fprintf(stderr, "to_yaml does not survive parse_config:\n%s\n--- became ---\n%s\n",
                 dumped.c_str(), twice.c_str());
    std::abort();
  }
  return 0;
}
