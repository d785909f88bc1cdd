#include "config.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>
#include <system_error>

namespace fashion_mnist {
namespace {

using tandem::ErrorCode;

// One accepted key: how its text becomes a value of the Config and back.
struct Key {
  std::string_view name;                                 // "training.epochs"
  std::string_view expected;                             // "an integer >= 1", shown in errors
  std::function<bool(Config&, std::string_view)> parse;  // false: not a valid value
  std::function<std::string(const Config&)> print;
};

std::string_view trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

std::optional<std::uint64_t> parse_uint(std::string_view s) {
  s = trim(s);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<double> parse_double(std::string_view s) {
  s = trim(s);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) {
    return std::nullopt;
  }
  return v;
}

std::optional<bool> parse_bool(std::string_view s) {
  std::string t(trim(s));
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  if (t == "true" || t == "yes" || t == "on" || t == "1") return true;
  if (t == "false" || t == "no" || t == "off" || t == "0") return false;
  return std::nullopt;
}

template <class Get>
Key uint_key(std::string_view name, std::uint64_t min, Get get) {
  return {name, min == 0 ? "an integer >= 0" : (min == 1 ? "an integer >= 1" : "an integer"),
          [get, min](Config& c, std::string_view s) {
            const auto v = parse_uint(s);
            if (!v || *v < min) return false;
            get(c) = *v;
            return true;
          },
          [get](const Config& c) { return fmt::format("{}", get(c)); }};
}

// A real number in [min, max) (or (min, max) with min_exclusive).
template <class Get>
Key real_key(std::string_view name, std::string_view expected, double min, bool min_exclusive,
             double max, Get get) {
  return {name, expected,
          [get, min, min_exclusive, max](Config& c, std::string_view s) {
            const auto v = parse_double(s);
            if (!v || *v < min || (min_exclusive && *v == min) || *v >= max) return false;
            get(c) = *v;
            return true;
          },
          [get](const Config& c) { return fmt::format("{}", get(c)); }};
}

template <class Get>
Key bool_key(std::string_view name, Get get) {
  return {name, "true or false",
          [get](Config& c, std::string_view s) {
            const auto v = parse_bool(s);
            if (!v) return false;
            get(c) = *v;
            return true;
          },
          [get](const Config& c) { return get(c) ? "true" : "false"; }};
}

// A YAML double-quoted scalar that reads back as `s`: control characters are escaped (a raw
// newline would be folded into a space).
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\x{:02x}", u);
      continue;
    }
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + '"';
}

template <class Get>
Key string_key(std::string_view name, Get get) {
  return {name, "a string",
          [get](Config& c, std::string_view s) {
            get(c) = std::string(s);
            return true;
          },
          [get](const Config& c) { return quoted(get(c)); }};
}

std::string_view choice_name(const std::string& s) {
  return s;
}
template <class E>
std::string_view choice_name(E e) {
  return to_string(e);
}

// One of a fixed list of words; E is an enum with to_string, or std::string itself.
template <class E, std::size_t N, class Get>
Key choice_key(std::string_view name, std::string_view expected, std::array<E, N> values, Get get) {
  return {name, expected,
          [get, values](Config& c, std::string_view s) {
            for (const E& v : values) {
              if (trim(s) == choice_name(v)) {
                get(c) = v;
                return true;
              }
            }
            return false;
          },
          [get](const Config& c) { return std::string(choice_name(get(c))); }};
}

// fault.kill_at_step: an integer, or "random".
Key kill_at_step_key() {
  return {"fault.kill_at_step", "an integer >= 0, or random",
          [](Config& c, std::string_view s) {
            if (trim(s) == "random") {
              c.fault.kill_at_step = 0;
              c.fault.kill_at_random = true;
              return true;
            }
            const auto v = parse_uint(s);
            if (!v) return false;
            c.fault.kill_at_step = *v;
            c.fault.kill_at_random = false;
            return true;
          },
          [](const Config& c) {
            return c.fault.kill_at_random ? std::string("random")
                                          : fmt::format("{}", c.fault.kill_at_step);
          }};
}

const std::vector<Key>& keys() {
  static const std::vector<Key> table = {
      string_key(
          "data.dir", [](auto& c) -> auto& { return c.data.dir; }),
      uint_key(
          "data.limit_train", 0, [](auto& c) -> auto& { return c.data.limit_train; }),
      uint_key(
          "data.limit_test", 0, [](auto& c) -> auto& { return c.data.limit_test; }),
      uint_key(
          "data.num_workers", 0, [](auto& c) -> auto& { return c.data.num_workers; }),
      uint_key(
          "data.prefetch_factor", 1, [](auto& c) -> auto& { return c.data.prefetch_factor; }),
      uint_key(
          "training.epochs", 1, [](auto& c) -> auto& { return c.training.epochs; }),
      uint_key(
          "training.batch_size", 0, [](auto& c) -> auto& { return c.training.batch_size; }),
      uint_key(
          "training.batch_size_per_rank", 0,
          [](auto& c) -> auto& { return c.training.batch_size_per_rank; }),
      uint_key(
          "training.accumulation_steps", 1,
          [](auto& c) -> auto& { return c.training.accumulation_steps; }),
      real_key(
          "training.lr", "a number > 0", 0.0, true, std::numeric_limits<double>::infinity(),
          [](auto& c) -> auto& { return c.training.lr; }),
      uint_key(
          "training.reference_batch", 1,
          [](auto& c) -> auto& { return c.training.reference_batch; }),
      choice_key(
          "training.lr_scaling", "one of linear, sqrt, none",
          std::array{LrScaling::linear, LrScaling::sqrt, LrScaling::none},
          [](auto& c) -> auto& { return c.training.lr_scaling; }),
      uint_key(
          "training.warmup_steps", 0, [](auto& c) -> auto& { return c.training.warmup_steps; }),
      choice_key(
          "training.lr_decay", "one of cosine, none", std::array{LrDecay::cosine, LrDecay::none},
          [](auto& c) -> auto& { return c.training.lr_decay; }),
      real_key(
          "training.momentum", "a number in [0, 1)", 0.0, false, 1.0,
          [](auto& c) -> auto& { return c.training.momentum; }),
      real_key(
          "training.weight_decay", "a number >= 0", 0.0, false,
          std::numeric_limits<double>::infinity(),
          [](auto& c) -> auto& { return c.training.weight_decay; }),
      uint_key(
          "training.seed", 0, [](auto& c) -> auto& { return c.training.seed; }),
      choice_key(
          "training.device", "one of cpu, cuda", std::array{DeviceKind::cpu, DeviceKind::cuda},
          [](auto& c) -> auto& { return c.training.device; }),
      choice_key(
          "training.precision", "one of fp32, bf16", std::array{Precision::fp32, Precision::bf16},
          [](auto& c) -> auto& { return c.training.precision; }),
      bool_key(
          "training.grad_scaler", [](auto& c) -> auto& { return c.training.grad_scaler; }),
      uint_key(
          "training.max_steps", 0, [](auto& c) -> auto& { return c.training.max_steps; }),
      uint_key(
          "training.eval_batch_size", 1,
          [](auto& c) -> auto& { return c.training.eval_batch_size; }),
      choice_key(
          "training.on_rank_loss", "one of stop, continue",
          std::array{OnRankLoss::stop, OnRankLoss::go_on},
          [](auto& c) -> auto& { return c.training.on_rank_loss; }),
      real_key(
          "training.replacement_wait_s", "a number of seconds, 0 or more, below 3600", 0.0, false,
          3600.0, [](auto& c) -> auto& { return c.training.replacement_wait_s; }),
      bool_key(
          "ddp.enabled", [](auto& c) -> auto& { return c.ddp.enabled; }),
      real_key(
          "ddp.bucket_cap_mb", "a number > 0", 0.0, true, 1 << 20,
          [](auto& c) -> auto& { return c.ddp.bucket_cap_mb; }),
      real_key(
          "ddp.first_bucket_mb", "a number > 0", 0.0, true, 1 << 20,
          [](auto& c) -> auto& { return c.ddp.first_bucket_mb; }),
      bool_key(
          "ddp.gradient_as_bucket_view",
          [](auto& c) -> auto& { return c.ddp.gradient_as_bucket_view; }),
      bool_key(
          "ddp.find_unused_parameters",
          [](auto& c) -> auto& { return c.ddp.find_unused_parameters; }),
      bool_key(
          "ddp.broadcast_buffers", [](auto& c) -> auto& { return c.ddp.broadcast_buffers; }),
      choice_key(
          "ddp.comm_hook", "one of allreduce, fp16_compress, bf16_compress",
          std::array{std::string("allreduce"), std::string("fp16_compress"),
                     std::string("bf16_compress")},
          [](auto& c) -> auto& { return c.ddp.comm_hook; }),
      string_key(
          "checkpoint.dir", [](auto& c) -> auto& { return c.checkpoint.dir; }),
      uint_key(
          "checkpoint.every_steps", 0, [](auto& c) -> auto& { return c.checkpoint.every_steps; }),
      bool_key(
          "checkpoint.resume", [](auto& c) -> auto& { return c.checkpoint.resume; }),
      uint_key(
          "checkpoint.keep_last", 1, [](auto& c) -> auto& { return c.checkpoint.keep_last; }),
      uint_key(
          "fault.kill_rank", 0, [](auto& c) -> auto& { return c.fault.kill_rank; }),
      kill_at_step_key(),
      uint_key(
          "fault.seed", 0, [](auto& c) -> auto& { return c.fault.seed; }),
      uint_key(
          "fault.slow_rank", 0, [](auto& c) -> auto& { return c.fault.slow_rank; }),
      uint_key(
          "fault.slow_rank_ms", 0, [](auto& c) -> auto& { return c.fault.slow_rank_ms; }),
      uint_key(
          "fault.slow_data_ms", 0, [](auto& c) -> auto& { return c.fault.slow_data_ms; }),
      string_key(
          "log.metrics", [](auto& c) -> auto& { return c.log.metrics; }),
      choice_key(
          "log.progress", "one of auto, bar, lines, none",
          std::array{ProgressMode::auto_detect, ProgressMode::bar, ProgressMode::lines,
                     ProgressMode::none},
          [](auto& c) -> auto& { return c.log.progress; }),
      uint_key(
          "log.every_steps", 1, [](auto& c) -> auto& { return c.log.every_steps; }),
      uint_key(
          "log.breakdown_every_steps", 0,
          [](auto& c) -> auto& { return c.log.breakdown_every_steps; }),
  };
  return table;
}

const Key* find_key(std::string_view name) {
  for (const Key& k : keys()) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

std::string_view section_of(std::string_view key) {
  return key.substr(0, key.find('.'));
}

std::vector<std::string_view> sections() {
  std::vector<std::string_view> out;
  for (const Key& k : keys()) {
    if (std::find(out.begin(), out.end(), section_of(k.name)) == out.end()) {
      out.push_back(section_of(k.name));
    }
  }
  return out;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// "unknown key ...: valid keys of training are a, b, c (did you mean training.epochs?)"
[[noreturn]] void unknown_key(std::string_view where, std::string_view name) {
  const std::string_view section = section_of(name);
  std::vector<std::string_view> candidates;
  const auto all_sections = sections();
  const bool known_section =
      name.find('.') != std::string_view::npos &&
      std::find(all_sections.begin(), all_sections.end(), section) != all_sections.end();
  std::string valid;
  if (known_section) {
    for (const Key& k : keys()) {
      if (section_of(k.name) == section) candidates.push_back(k.name);
    }
    std::vector<std::string_view> short_names;
    for (auto c : candidates) short_names.push_back(c.substr(section.size() + 1));
    valid = fmt::format("valid keys of {} are {}", section, fmt::join(short_names, ", "));
  } else {
    for (const Key& k : keys()) candidates.push_back(k.name);
    valid = fmt::format("valid sections are {}", fmt::join(all_sections, ", "));
  }
  std::string_view best;
  std::size_t best_distance = ~std::size_t{0};
  for (auto c : candidates) {
    // Suggest only close matches: a typo or two, a little more in long names.
    const std::size_t d = edit_distance(name, c);
    if (d <= std::max<std::size_t>(2, c.size() / 5) && d < best_distance)
      best_distance = d, best = c;
  }
  TANDEM_THROW(ErrorCode::InvalidArgument, "{}: unknown key '{}': {}{}", where, name, valid,
               best.empty() ? std::string() : fmt::format(" (did you mean {}?)", best));
}

void apply(Config& config, std::string_view where, std::string_view name, std::string_view text) {
  const Key* key = find_key(name);
  if (key == nullptr) unknown_key(where, name);
  if (!key->parse(config, text)) {
    TANDEM_THROW(ErrorCode::InvalidArgument, "{}: {}: '{}' is not valid: expected {}", where, name,
                 text, key->expected);
  }
  config.origin[std::string(name)] = std::string(where);
}

std::string mark_of(std::string_view source, const YAML::Node& node) {
  const auto m = node.Mark();
  if (m.is_null()) return std::string(source);
  return fmt::format("{}:{}", source, m.line + 1);
}

// A mapping key as text. YAML allows any node as a key ("? [a, b]: 1"); as<std::string>()
// would throw YAML's own exception for those.
std::string key_text(std::string_view source, const YAML::Node& key) {
  if (!key.IsScalar())
    TANDEM_THROW(ErrorCode::InvalidArgument, "{}: a key must be a plain name, not a {}",
                 mark_of(source, key),
                 key.IsSequence() ? "list" : (key.IsMap() ? "mapping" : "null"));
  return key.Scalar();
}

void apply_yaml(Config& config, const YAML::Node& root, std::string_view source) {
  if (!root || root.IsNull()) return;  // an empty file: every default
  if (!root.IsMap()) {
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "{}: the configuration must be a mapping of sections ({}), not a {}",
                 mark_of(source, root), fmt::join(sections(), ", "),
                 root.IsSequence() ? "list" : "single value");
  }
  for (const auto& section : root) {
    const std::string name = key_text(source, section.first);
    const YAML::Node& body = section.second;
    const auto all = sections();
    if (std::find(all.begin(), all.end(), name) == all.end()) {
      unknown_key(mark_of(source, section.first), name);
    }
    if (body.IsNull()) continue;
    if (!body.IsMap()) {
      TANDEM_THROW(ErrorCode::InvalidArgument,
                   "{}: section '{}' must be a mapping of keys (e.g. {}: {{ ... }}), not a value",
                   mark_of(source, section.first), name, name);
    }
    for (const auto& entry : body) {
      const std::string key = name + "." + key_text(source, entry.first);
      const std::string where = mark_of(source, entry.first);
      const YAML::Node& value = entry.second;
      if (find_key(key) == nullptr) unknown_key(where, key);
      if (!value.IsScalar()) {
        TANDEM_THROW(ErrorCode::InvalidArgument, "{}: {}: {}: expected {}", where, key,
                     value.IsNull() ? "no value given" : "a list or mapping is not valid",
                     find_key(key)->expected);
      }
      apply(config, where, key, value.Scalar());
    }
  }
}

void validate(const Config& c) {
  const auto& t = c.training;
  if (t.batch_size != 0 && t.batch_size_per_rank != 0) {
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "training.batch_size ({}, set at {}) and training.batch_size_per_rank ({}, set "
                 "at {}) are both set: set one of them and the other to 0 (e.g. -o "
                 "training.batch_size=0 -o training.batch_size_per_rank={})",
                 t.batch_size, c.where("training.batch_size"), t.batch_size_per_rank,
                 c.where("training.batch_size_per_rank"), t.batch_size_per_rank);
  }
  if (t.batch_size == 0 && t.batch_size_per_rank == 0) {
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "{}: neither training.batch_size (global) nor training.batch_size_per_rank is "
                 "set: set one of them to a positive integer (e.g. -o training.batch_size=128)",
                 c.source);
  }
  const std::string& m = c.log.metrics;
  const auto ends_with = [&](std::string_view suffix) {
    return m.size() >= suffix.size() &&
           m.compare(m.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (!m.empty() && !ends_with(".csv") && !ends_with(".json")) {
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "{}: log.metrics: '{}' has neither a .csv nor a .json extension: name a .csv "
                 "or .json file (the format follows the extension), or \"\" for none",
                 c.where("log.metrics"), m);
  }
}

}  // namespace

std::string_view to_string(LrScaling v) noexcept {
  switch (v) {
    case LrScaling::linear:
      return "linear";
    case LrScaling::sqrt:
      return "sqrt";
    case LrScaling::none:
      return "none";
  }
  return "?";
}

std::string_view to_string(LrDecay v) noexcept {
  return v == LrDecay::cosine ? "cosine" : "none";
}

std::string_view to_string(Precision v) noexcept {
  return v == Precision::bf16 ? "bf16" : "fp32";
}

std::string_view to_string(OnRankLoss v) noexcept {
  return v == OnRankLoss::go_on ? "continue" : "stop";
}

std::string_view to_string(DeviceKind v) noexcept {
  return v == DeviceKind::cuda ? "cuda" : "cpu";
}

std::string_view to_string(ProgressMode v) noexcept {
  switch (v) {
    case ProgressMode::auto_detect:
      return "auto";
    case ProgressMode::bar:
      return "bar";
    case ProgressMode::lines:
      return "lines";
    case ProgressMode::none:
      return "none";
  }
  return "?";
}

std::string Config::where(std::string_view key) const {
  const auto it = origin.find(key);
  return it == origin.end() ? std::string("default") : it->second;
}

Config parse_config(std::string_view yaml_text, std::string_view source,
                    std::span<const Override> overrides) {
  Config config;
  config.source = std::string(source);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    TANDEM_THROW(ErrorCode::InvalidArgument, "{}:{}:{}: not valid YAML: {}", source,
                 e.mark.line + 1, e.mark.column + 1, e.msg);
  }
  apply_yaml(config, root, source);
  for (const Override& o : overrides) {
    const auto eq = o.assignment.find('=');
    if (eq == std::string::npos) {
      TANDEM_THROW(ErrorCode::InvalidArgument,
                   "{} {}: expected section.key=value (e.g. -o training.epochs=3)", o.origin,
                   o.assignment);
    }
    apply(config, o.origin, trim(std::string_view(o.assignment).substr(0, eq)),
          std::string_view(o.assignment).substr(eq + 1));
  }
  validate(config);
  return config;
}

Config load_config(const std::filesystem::path& file, std::span<const Override> overrides) {
  std::ifstream in(file);
  if (!in) {
    TANDEM_THROW(ErrorCode::Io, "cannot read the configuration file {}: {} (pass --config FILE)",
                 file.string(), std::error_code(errno, std::generic_category()).message());
  }
  std::stringstream text;
  text << in.rdbuf();
  return parse_config(text.str(), file.string(), overrides);
}

std::vector<std::string_view> config_keys() {
  std::vector<std::string_view> out;
  for (const Key& k : keys()) out.push_back(k.name);
  return out;
}

std::string to_yaml(const Config& config) {
  std::string out;
  std::string_view section;
  for (const Key& k : keys()) {
    if (section_of(k.name) != section) {
      section = section_of(k.name);
      out += fmt::format("{}:\n", section);
    }
    out += fmt::format("  {}: {}\n", k.name.substr(section.size() + 1), k.print(config));
  }
  return out;
}

void check_data_dir(const Config& config) {
  std::error_code ec;
  if (!std::filesystem::is_directory(config.data.dir, ec)) {
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "data.dir: the Fashion-MNIST directory {} (set at {}) does not exist: install "
                 "Debian's dataset-fashion-mnist (apt-get install dataset-fashion-mnist) or pass "
                 "--data DIR (a directory holding train-images-idx3-ubyte.gz and the other three "
                 "files)",
                 config.data.dir, config.where("data.dir"));
  }
}

}  // namespace fashion_mnist
