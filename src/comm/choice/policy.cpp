#include "comm/choice/policy.hpp"

#include "algorithms/common.hpp"
#include "comm/choice/tuning.hpp"
#include "comm/diag/validate.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <vector>

namespace tandem::comm {
namespace {

std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string all_names(const algorithms::Registry& reg) {
  std::vector<std::string_view> names;
  for (std::size_t k = 0; k < kKindCount; ++k) {
    for (const auto* a : reg.of(static_cast<CollectiveKind>(k))) {
      bool seen = false;
      for (auto n : names) seen = seen || n == a->name();
      if (!seen) names.push_back(a->name());
    }
  }
  return fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace

std::string_view forced_algorithm(std::string_view forced, CollectiveKind kind) {
  std::string_view bare;
  std::string_view specific;
  std::string_view rest = forced;
  while (!rest.empty()) {
    const std::size_t cut = rest.find_first_of(",;");
    const std::string_view entry = trim(rest.substr(0, cut));
    rest = cut == std::string_view::npos ? std::string_view{} : rest.substr(cut + 1);
    if (entry.empty()) continue;
    const std::size_t eq = entry.find('=');
    if (eq == std::string_view::npos) {
      bare = entry;
      continue;
    }
    const std::string_view coll = trim(entry.substr(0, eq));
    const std::string_view algo = trim(entry.substr(eq + 1));
    const auto k = parse_collective(coll);
    if (!k || algo.empty()) {
      TANDEM_THROW(ErrorCode::InvalidArgument,
                   "cannot parse algorithm choice '{}' in '{}': write NAME or COLLECTIVE=NAME "
                   "(e.g. TANDEM_ALGO=ring or TANDEM_ALGO=allreduce=ring,broadcast=tree)",
                   entry, forced);
    }
    if (*k == kind) specific = algo;
  }
  return specific.empty() ? bare : specific;
}

std::string algorithm_names(const algorithms::Registry& reg, CollectiveKind kind) {
  std::vector<std::string_view> names;
  for (const auto* a : reg.of(kind)) names.push_back(a->name());
  return fmt::format("{}", fmt::join(names, ", "));
}

AlgoPolicy::AlgoPolicy(std::string_view spec, std::string_view source,
                       const algorithms::Registry& reg)
    : spec_(trim(spec)), source_(source) {
  if (spec_.empty()) return;
  std::vector<std::string_view> unknown;
  for (std::size_t k = 0; k < kKindCount; ++k) {
    std::string_view name;
    try {
      name = forced_algorithm(spec_, static_cast<CollectiveKind>(k));
    } catch (const Error& e) {
      TANDEM_THROW(ErrorCode::InvalidArgument,
                   "{}='{}': {} (example: {}=ring or {}=allreduce=ring,broadcast=tree)", source_,
                   spec_, e.message(), source_, source_);
    }
    forced_[k] = std::string(name);
    if (name.empty()) continue;
    bool exists = false;
    for (std::size_t j = 0; j < kKindCount && !exists; ++j)
      exists = reg.find(static_cast<CollectiveKind>(j), name) != nullptr;
    if (!exists && std::find(unknown.begin(), unknown.end(), name) == unknown.end())
      unknown.push_back(name);
  }
  if (!unknown.empty())
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "{}='{}': no collective has an algorithm named '{}' "
                 "(known: {})",
                 source_, spec_, fmt::join(unknown, "', '"), all_names(reg));
}

AlgoPolicy::AlgoPolicy(const AlgoPolicy& other)
    : spec_(other.spec_),
      source_(other.source_),
      forced_(other.forced_),
      tuning_file_(other.tuning_file_),
      tuning_(other.tuning_) {}

AlgoPolicy& AlgoPolicy::operator=(const AlgoPolicy& other) {
  if (this != &other) {
    spec_ = other.spec_;
    source_ = other.source_;
    forced_ = other.forced_;
    set_tuning(other.tuning_file_, other.tuning_);
  }
  return *this;
}

void AlgoPolicy::set_tuning(std::shared_ptr<const TuningFile> file, const TuningEntry* entry) {
  tuning_file_ = std::move(file);
  tuning_ = entry;
  // Cached choices were made without it.
  for (auto& f : fallback_logged_) f.store(false, std::memory_order_relaxed);
  for (auto& f : tuning_fallback_logged_) f.store(false, std::memory_order_relaxed);
  for (auto& c : choices_) c.store(0, std::memory_order_relaxed);
  for (auto& n : named_) n.store(nullptr, std::memory_order_relaxed);
  cached_world_.store(0, std::memory_order_relaxed);
}

const algorithms::Algorithm& AlgoPolicy::choose(const algorithms::Registry& reg,
                                                const algorithms::Call& call, int world,
                                                std::string_view per_call) const {
  if (!per_call.empty()) {
    // The last name asked for is remembered per collective (benchmarks name one per call).
    const bool builtin = &reg == &algorithms::Registry::builtin();
    std::atomic<const algorithms::Algorithm*>& last = named_[index_of(call.kind)];
    const algorithms::Algorithm* a = builtin ? last.load(std::memory_order_relaxed) : nullptr;
    if (a == nullptr || a->name() != per_call) {
      a = reg.find(call.kind, per_call);
      if (builtin && a != nullptr) last.store(a, std::memory_order_relaxed);
    }
    if (a == nullptr)
      TANDEM_THROW(ErrorCode::InvalidArgument,
                   "{}: no algorithm named '{}' (CallOptions::algorithm; known: {})",
                   to_string(call.kind), per_call, algorithm_names(reg, call.kind));
    if (!a->supports(call, world))
      TANDEM_THROW(ErrorCode::InvalidArgument,
                   "{}: algorithm '{}' does not support this call ({} x {} on {} ranks); "
                   "leave CallOptions::algorithm empty to let the selector choose",
                   to_string(call.kind), per_call, to_string(call.in.dtype), call.in.count, world);
    return *a;
  }
  const auto dtype = static_cast<std::size_t>(shape_dtype(call));
  int cached_world = cached_world_.load(std::memory_order_relaxed);
  if (cached_world == 0 &&
      cached_world_.compare_exchange_strong(cached_world, world, std::memory_order_relaxed))
    cached_world = world;
  if (&reg != &algorithms::Registry::builtin() || dtype >= kDtypeCount || world != cached_world)
    return choose_default(reg, call, world);
  std::atomic<std::uint8_t>& entry =
      choices_[(index_of(call.kind) * kDtypeCount + dtype) * kSizeClasses +
               algorithms::size_class(call)];
  if (const unsigned known = entry.load(std::memory_order_relaxed); known != 0)
    return reg.at(known - 1);
  const algorithms::Algorithm& chosen = choose_default(reg, call, world);
  const std::size_t index = reg.index_of(chosen);
  if (index < UINT8_MAX)
    entry.store(static_cast<std::uint8_t>(index + 1), std::memory_order_relaxed);
  return chosen;
}

const algorithms::Algorithm& AlgoPolicy::choose_default(const algorithms::Registry& reg,
                                                        const algorithms::Call& call,
                                                        int world) const {
  const std::string& forced = forced_[index_of(call.kind)];
  if (!forced.empty()) {
    const auto* a = reg.find(call.kind, forced);
    if (a != nullptr && a->supports(call, world)) return *a;
    if (!fallback_logged_[index_of(call.kind)].exchange(true, std::memory_order_relaxed))
      TANDEM_INFO(algo,
                  "{}={}: '{}' does not support a {} of {} x {} on {} ranks; the selector "
                  "chooses instead (logged once per collective)",
                  source_, spec_, forced, to_string(call.kind), to_string(call.in.dtype),
                  call.in.count, world);
  }
  if (tuning_ != nullptr && &reg == &algorithms::Registry::builtin()) {
    const auto* a = tuning_->lookup(call.kind, algorithms::detail::call_bytes(call));
    if (a != nullptr && a->supports(call, world)) return *a;
    if (a != nullptr &&
        !tuning_fallback_logged_[index_of(call.kind)].exchange(true, std::memory_order_relaxed))
      TANDEM_INFO(algo,
                  "{}: '{}' does not support a {} of {} x {} on {} ranks; the built-in choice "
                  "runs instead (logged once per collective)",
                  tuning_->label, a->name(), to_string(call.kind), to_string(call.in.dtype),
                  call.in.count, world);
  }
  return reg.default_choice(call, world);
}

algorithms::Call probe_call(CollectiveKind kind, std::size_t bytes, int world,
                            const algorithms::HostLayout* hosts) {
  algorithms::Call c;
  c.kind = kind;
  c.hosts = hosts;
  const std::size_t n = bytes / sizeof(float);
  const std::size_t w = static_cast<std::size_t>(world < 1 ? 1 : world);
  std::size_t in = n;
  std::size_t out = n;
  switch (kind) {
    case CollectiveKind::allgather:
    case CollectiveKind::allgatherv:
    case CollectiveKind::gather:
      in = n / w;
      out = in * w;
      break;
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::scatter:
      out = n / w;
      in = out * w;
      break;
    case CollectiveKind::alltoall:
      in = out = n / w * w;
      break;
    case CollectiveKind::barrier:
      in = out = 0;
      break;
    default:
      break;
  }
  // Distinct dummy addresses: the shape matters, not the memory (nothing runs).
  static float dummy[2];
  c.in = BufferView::raw(in > 0 ? &dummy[0] : nullptr, in, DataType::f32);
  c.out = BufferView::raw(out > 0 ? &dummy[1] : nullptr, out, DataType::f32);
  return c;
}

std::string format_bytes(std::size_t bytes) {
  if (bytes >= (1u << 30) && bytes % (1u << 30) == 0) return fmt::format("{}G", bytes >> 30);
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return fmt::format("{}M", bytes >> 20);
  if (bytes >= (1u << 10) && bytes % (1u << 10) == 0) return fmt::format("{}K", bytes >> 10);
  return fmt::format("{}", bytes);
}

std::string describe_choices(const AlgoPolicy& policy, const algorithms::Registry& reg,
                             CollectiveKind kind, int world, const algorithms::HostLayout* hosts) {
  struct Range {
    std::size_t first;  // index into sizes
    std::string_view name;
  };
  std::vector<Range> ranges;
  constexpr std::size_t kMax = std::size_t{1} << 30;
  std::vector<std::size_t> sizes{0};
  for (std::size_t b = 4; b <= kMax; b *= 2) sizes.push_back(b);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    std::string_view name;
    try {
      name = policy.choose(reg, probe_call(kind, sizes[i], world, hosts), world, {}).name();
    } catch (const Error&) {
      name = "none";
    }
    if (ranges.empty() || ranges.back().name != name) ranges.push_back({i, name});
  }
  std::string s;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    if (i > 0) s += ", ";
    const std::size_t first = sizes[ranges[i].first];
    if (i + 1 < ranges.size()) {
      const std::size_t last = sizes[ranges[i + 1].first - 1];
      s += first == last
               ? fmt::format("{} {}", format_bytes(last), ranges[i].name)
               : fmt::format("{}-{} {}", format_bytes(first), format_bytes(last), ranges[i].name);
    } else {
      s += fmt::format("{}+ {}", format_bytes(first), ranges[i].name);
    }
  }
  return s;
}

}  // namespace tandem::comm
