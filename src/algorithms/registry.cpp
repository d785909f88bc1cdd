#include "algorithms/algorithm.hpp"
#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"
#include "algorithms/model.hpp"

#include <tandem/error.hpp>

#include <algorithm>
#include <bit>
#include <span>

namespace tandem::algorithms {

namespace {

// Default crossovers between latency-bound and bandwidth-bound algorithms: the textbook
// values except where `tandem-perf --tune` clearly disagreed (docs/tuning.md); a tuning file
// (TANDEM_TUNING_FILE) refines them per machine. Each is a power of two: choices are cached
// per size class (size_class()), which must not straddle a crossover. From the *DirectBytes
// up, "direct" asks whether the buffers are registered (one small message) and runs one-copy
// when they are; otherwise broadcast and allgather read the peers' plain buffers with
// cross-memory attach where the kernel allows it (algorithms/cma.hpp), and the rest run as a
// ring (allreduce/direct.cpp).
constexpr std::size_t kAllreduceSmallBytes = 16u << 10;  // below: recursive_doubling
// On 2 ranks recursive doubling is one exchange of the whole vector, the ring two of halves:
// fewer steps win below 64 KiB (docs/tuning.md).
constexpr std::size_t kAllreduceSmallBytesTwoRanks = 64u << 10;
constexpr std::size_t kAllreduceDirectBytes = 1u << 20;  // from here: direct
// From here: direct (one copy: from a registered source's mapping, else by cross-memory attach,
// the root writing 1/n itself when in place; broadcast/direct.cpp). Chosen for broadcast in
// place, as programs call it: from 32 KiB direct leads the tree there (docs/tuning.md).
constexpr std::size_t kBroadcastDirectBytes = 32u << 10;
constexpr std::size_t kReduceSmallBytes = 64u << 10;  // below: tree
// Result size; from here: direct (one copy from each peer's input: mapped when registered,
// else by cross-memory attach), which leads the log-step algorithms and the ring from 16 KiB
// (docs/tuning.md).
constexpr std::size_t kAllgatherDirectBytes = 16u << 10;
constexpr std::size_t kReduceScatterSmallBytes = 64u << 10;  // input size; below: recursive_halving
constexpr std::size_t kReduceScatterDirectBytes = 1u << 20;  // input size; from here: direct
constexpr std::size_t kGatherSmallBytes = 4u << 10;          // block size; below: binomial
constexpr int kGatherBinomialMinWorld = 8;                   // fewer ranks: linear is as good
// On 2 ranks reduce's ring (an exchange of halves, then a send to the root) loses to the
// tree (one send) at every size, over shared memory and TCP (docs/tuning.md).
constexpr int kReduceTreeOnlyMaxWorld = 2;
static_assert(std::has_single_bit(kAllreduceSmallBytes) &&
              std::has_single_bit(kAllreduceSmallBytesTwoRanks) &&
              std::has_single_bit(kAllreduceDirectBytes) &&
              std::has_single_bit(kBroadcastDirectBytes) &&
              std::has_single_bit(kAllgatherDirectBytes) &&
              std::has_single_bit(kReduceScatterDirectBytes) &&
              std::has_single_bit(kReduceSmallBytes) &&
              std::has_single_bit(kReduceScatterSmallBytes) &&
              std::has_single_bit(kGatherSmallBytes));

// ASCII only, inline: algorithm names are ASCII, and the selector's first choice at each new
// size looks up a few of them (std::tolower is a call into the C library per character).
constexpr char ascii_lower(char c) noexcept {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

bool iequal(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return ascii_lower(x) == ascii_lower(y);
         });
}

using Names = std::span<const std::string_view>;

constexpr std::string_view kRdRing[] = {"recursive_doubling", "ring"};
constexpr std::string_view kRingRab[] = {"ring", "rabenseifner"};
constexpr std::string_view kRabRing[] = {"rabenseifner", "ring"};
constexpr std::string_view kHierRing[] = {"hierarchical", "ring", "rabenseifner"};
constexpr std::string_view kHierRab[] = {"hierarchical", "rabenseifner", "ring"};
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
      if (bytes < (world == 2 ? kAllreduceSmallBytesTwoRanks : kAllreduceSmallBytes))
        return Names(kRdRing);
      // Across hosts the links between them are the bottleneck: keep traffic inside a host
      // where there is a host to keep it in (hierarchical supports() only such layouts;
      // between its hosts it takes a ring or a tree by the same model). Elsewhere the ring's
      // 2(n-1) steps against Rabenseifner's 2 log2 n, by the α–β–γ model (model.hpp).
      if (call.hosts != nullptr && call.hosts->spans_hosts())
        return model::prefer_log_steps(world, bytes, model::kTcp) ? Names(kHierRab)
                                                                  : Names(kHierRing);
      if (bytes >= kAllreduceDirectBytes) return Names(kDirectRing);
      return model::prefer_log_steps(world, bytes, model::kShm) ? Names(kRabRing) : Names(kRingRab);
    case CollectiveKind::broadcast:
      return bytes >= kBroadcastDirectBytes ? Names(kDirectRingTree) : Names(kTreeRing);
    case CollectiveKind::reduce:
      return bytes < kReduceSmallBytes || world <= kReduceTreeOnlyMaxWorld ? Names(kTreeRing)
                                                                           : Names(kRingTree);
    case CollectiveKind::allgather:
      return bytes >= kAllgatherDirectBytes ? Names(kDirectRingOnly) : Names(kSmallAllgather);
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
#define TANDEM_REGISTER_ALGORITHM(collective, name) r.add(make_##collective##_##name());
    TANDEM_BUILTIN_ALGORITHMS(TANDEM_REGISTER_ALGORITHM)
#undef TANDEM_REGISTER_ALGORITHM
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

bool Algorithm::supports(const Call&, int) const noexcept {
  return true;
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

const Algorithm& Registry::default_choice(const Call& call, int world) const {
  for (std::string_view pref : preference(call, world)) {
    const Algorithm* a = find(call.kind, pref);
    if (a != nullptr && a->supports(call, world)) return *a;
  }
  for (const auto& a : all_)
    if (a->kind() == call.kind && a->supports(call, world)) return *a;
  TANDEM_THROW(ErrorCode::InvalidArgument, "no algorithm supports this {} on {} ranks",
               to_string(call.kind), world);
}

}  // namespace tandem::algorithms
