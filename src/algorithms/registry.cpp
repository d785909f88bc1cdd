#include "algorithms/algorithm.hpp"
#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <optional>
#include <span>
#include <string>

namespace tandem::algorithms {

namespace {

// Default crossovers between latency-bound and bandwidth-bound algorithms, checked with
// `tandem-perf --tune` on 2 ranks over shared memory and TCP (README, "Tuning"); where the
// measurements did not clearly disagree the textbook values stay, and a tuning file
// (TANDEM_TUNING_FILE) refines them per machine. Each is a power of two: choices are cached
// per size class (size_class()), which must not straddle a crossover. From the *DirectBytes
// up, "direct" asks whether the buffers are registered (one small message) and runs one-copy
// when they are, as a ring otherwise (allreduce/direct.cpp).
constexpr std::size_t kAllreduceSmallBytes = 16u << 10;      // below: recursive_doubling
constexpr std::size_t kAllreduceDirectBytes = 1u << 20;      // from here: direct
constexpr std::size_t kBroadcastSmallBytes = 64u << 10;      // below: tree
constexpr std::size_t kBroadcastDirectBytes = 1u << 20;      // from here: direct
constexpr std::size_t kReduceSmallBytes = 64u << 10;         // below: tree
constexpr std::size_t kAllgatherSmallBytes = 64u << 10;      // result size; below: log-step ones
constexpr std::size_t kAllgatherDirectBytes = 1u << 20;      // result size; from here: direct
constexpr std::size_t kReduceScatterSmallBytes = 64u << 10;  // input size; below: recursive_halving
constexpr std::size_t kReduceScatterDirectBytes = 1u << 20;  // input size; from here: direct
constexpr std::size_t kGatherSmallBytes = 4u << 10;          // block size; below: binomial
constexpr int kGatherBinomialMinWorld = 8;                   // fewer ranks: linear is as good
// On 2 ranks reduce's ring (an exchange of halves, then a send to the root) lost to tree
// (one send) at every size from 64 KiB to 16 MiB, by 1.3-4x, over shared memory and TCP.
constexpr int kReduceTreeOnlyMaxWorld = 2;
static_assert(
    std::has_single_bit(kAllreduceSmallBytes) && std::has_single_bit(kAllreduceDirectBytes) &&
    std::has_single_bit(kBroadcastDirectBytes) && std::has_single_bit(kAllgatherDirectBytes) &&
    std::has_single_bit(kReduceScatterDirectBytes) && std::has_single_bit(kBroadcastSmallBytes) &&
    std::has_single_bit(kReduceSmallBytes) && std::has_single_bit(kAllgatherSmallBytes) &&
    std::has_single_bit(kReduceScatterSmallBytes) && std::has_single_bit(kGatherSmallBytes));

bool iequal(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

constexpr std::array kAllKinds = {
    CollectiveKind::allreduce, CollectiveKind::broadcast,  CollectiveKind::reduce,
    CollectiveKind::allgather, CollectiveKind::allgatherv, CollectiveKind::reduce_scatter,
    CollectiveKind::alltoall,  CollectiveKind::gather,     CollectiveKind::scatter,
    CollectiveKind::send,      CollectiveKind::recv,       CollectiveKind::barrier,
};

std::optional<CollectiveKind> kind_named(std::string_view name) noexcept {
  for (CollectiveKind k : kAllKinds)
    if (iequal(name, to_string(k))) return k;
  return std::nullopt;
}

using Names = std::span<const std::string_view>;

constexpr std::string_view kRdRing[] = {"recursive_doubling", "ring"};
constexpr std::string_view kRingRab[] = {"ring", "rabenseifner"};
constexpr std::string_view kHierRing[] = {"hierarchical", "ring", "rabenseifner"};
constexpr std::string_view kDirectRing[] = {"direct", "ring", "rabenseifner"};
constexpr std::string_view kTreeRing[] = {"tree", "ring"};
constexpr std::string_view kRingTree[] = {"ring", "tree"};
constexpr std::string_view kDirectRingTree[] = {"direct", "ring", "tree"};
constexpr std::string_view kSmallAllgather[] = {"recursive_doubling", "bruck", "ring"};
constexpr std::string_view kRing[] = {"ring"};
constexpr std::string_view kDirectRingOnly[] = {"direct", "ring"};
constexpr std::string_view kRhRing[] = {"recursive_halving", "ring"};
constexpr std::string_view kBinomialLinear[] = {"binomial", "linear"};
constexpr std::string_view kLinear[] = {"linear"};

/// Default order of preference for `call` (the first that supports it wins; if none does,
/// the first registered one that does).
Names preference(const Call& call, int world) noexcept {
  const std::size_t bytes = detail::call_bytes(call);
  switch (call.kind) {
    case CollectiveKind::allreduce:
      if (bytes < kAllreduceSmallBytes) return Names(kRdRing);
      // Across hosts the links between them are the bottleneck: keep traffic inside a host
      // where there is a host to keep it in (hierarchical supports() only such layouts).
      if (call.hosts != nullptr && call.hosts->spans_hosts()) return Names(kHierRing);
      return bytes >= kAllreduceDirectBytes ? Names(kDirectRing) : Names(kRingRab);
    case CollectiveKind::broadcast:
      if (bytes >= kBroadcastDirectBytes) return Names(kDirectRingTree);
      return bytes < kBroadcastSmallBytes ? Names(kTreeRing) : Names(kRingTree);
    case CollectiveKind::reduce:
      return bytes < kReduceSmallBytes || world <= kReduceTreeOnlyMaxWorld ? Names(kTreeRing)
                                                                           : Names(kRingTree);
    case CollectiveKind::allgather:
      if (bytes >= kAllgatherDirectBytes) return Names(kDirectRingOnly);
      return bytes < kAllgatherSmallBytes ? Names(kSmallAllgather) : Names(kRing);
    case CollectiveKind::reduce_scatter:
      if (bytes >= kReduceScatterDirectBytes) return Names(kDirectRingOnly);
      return bytes < kReduceScatterSmallBytes ? Names(kRhRing) : Names(kRing);
    case CollectiveKind::gather:
    case CollectiveKind::scatter:
      return bytes < kGatherSmallBytes && world >= kGatherBinomialMinWorld ? Names(kBinomialLinear)
                                                                           : Names(kLinear);
    default:
      return {};
  }
}

}  // namespace

const Registry& Registry::builtin() {
  static const Registry registry = [] {
    Registry r;
    using namespace detail;
    r.add(make_allreduce_ring());
    r.add(make_allreduce_recursive_doubling());
    r.add(make_allreduce_tree());
    r.add(make_allreduce_rabenseifner());
    r.add(make_allreduce_hierarchical());
    r.add(make_allreduce_direct());
    r.add(make_broadcast_tree());
    r.add(make_broadcast_ring());
    r.add(make_broadcast_direct());
    r.add(make_reduce_tree());
    r.add(make_reduce_ring());
    r.add(make_allgather_ring());
    r.add(make_allgather_recursive_doubling());
    r.add(make_allgather_bruck());
    r.add(make_allgather_direct());
    r.add(make_allgatherv_ring());
    r.add(make_reduce_scatter_ring());
    r.add(make_reduce_scatter_recursive_halving());
    r.add(make_reduce_scatter_direct());
    r.add(make_alltoall_pairwise());
    r.add(make_gather_linear());
    r.add(make_gather_binomial());
    r.add(make_scatter_linear());
    r.add(make_scatter_binomial());
    r.add(make_barrier_dissemination());
    r.add(make_send_direct());
    r.add(make_recv_direct());
    return r;
  }();
  return registry;
}

void Registry::add(std::unique_ptr<Algorithm> a) {
  TANDEM_CHECK(a != nullptr, "null algorithm");
  TANDEM_CHECK(find(a->kind(), a->name()) == nullptr, "algorithm '{}' registered twice for {}",
               a->name(), to_string(a->kind()));
  all_.push_back(std::move(a));
}

std::size_t Registry::index_of(const Algorithm& a) const noexcept {
  for (std::size_t i = 0; i < all_.size(); ++i)
    if (all_[i].get() == &a) return i;
  return all_.size();
}

std::size_t size_class(const Call& call) noexcept {
  return static_cast<std::size_t>(std::bit_width(detail::call_bytes(call)));
}

std::vector<const Algorithm*> Registry::of(CollectiveKind kind) const {
  std::vector<const Algorithm*> out;
  for (const auto& a : all_)
    if (a->kind() == kind) out.push_back(a.get());
  return out;
}

const Algorithm* Registry::find(CollectiveKind kind, std::string_view name) const {
  for (const auto& a : all_)
    if (a->kind() == kind && iequal(a->name(), name)) return a.get();
  return nullptr;
}

const Algorithm& Registry::select(const Call& call, int world, std::string_view forced,
                                  bool strict) const {
  const std::string_view name = forced_algorithm(forced, call.kind);
  if (!name.empty()) {
    const Algorithm* a = find(call.kind, name);
    if (a == nullptr) {
      const bool known_elsewhere = std::any_of(
          all_.begin(), all_.end(), [&](const auto& x) { return iequal(x->name(), name); });
      if (strict || !known_elsewhere) {
        std::string valid;
        for (const Algorithm* x : of(call.kind))
          valid += fmt::format("{}{}", valid.empty() ? "" : ", ", x->name());
        TANDEM_THROW(ErrorCode::InvalidArgument,
                     "unknown algorithm '{}' for {}: valid names are {} (check TANDEM_ALGO or "
                     "CallOptions::algorithm)",
                     name, to_string(call.kind), valid);
      }
    } else if (a->supports(call, world)) {
      return *a;
    } else if (strict) {
      TANDEM_THROW(ErrorCode::InvalidArgument,
                   "algorithm '{}' does not support this {} ({} x {} on {} ranks); leave the "
                   "choice to the selector or pick another algorithm",
                   a->name(), to_string(call.kind), to_string(call.in.dtype), call.in.count, world);
    }
  }
  for (std::string_view pref : preference(call, world)) {
    const Algorithm* a = find(call.kind, pref);
    if (a != nullptr && a->supports(call, world)) return *a;
  }
  for (const auto& a : all_)
    if (a->kind() == call.kind && a->supports(call, world)) return *a;
  TANDEM_THROW(ErrorCode::InvalidArgument, "no algorithm supports this {} on {} ranks",
               to_string(call.kind), world);
}

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
    const auto k = kind_named(coll);
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

}  // namespace tandem::algorithms
