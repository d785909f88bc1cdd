#include "algorithms/algorithm.hpp"
#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"

#include <tandem/error.hpp>

#include <algorithm>
#include <bit>
#include <span>

namespace tandem::algorithms {

namespace {

// Default crossovers between latency-bound and bandwidth-bound algorithms, checked with
// `tandem-perf --tune` on 2 ranks over shared memory and TCP (README, "Tuning"); where the
// measurements did not clearly disagree the textbook values stay, and a tuning file
// (TANDEM_TUNING_FILE) refines them per machine. Each is a power of two: choices are cached
// per size class (size_class()), which must not straddle a crossover. From the *DirectBytes
// up, "direct" asks whether the buffers are registered (one small message) and runs one-copy
// when they are; otherwise broadcast and allgather read the peers' plain buffers with
// cross-memory attach where the kernel allows it (algorithms/cma.hpp), and the rest run as a
// ring (allreduce/direct.cpp).
constexpr std::size_t kAllreduceSmallBytes = 16u << 10;  // below: recursive_doubling
// On 2 ranks recursive doubling is one exchange of the whole vector, the ring two of halves:
// `tandem-perf --tune` (3 runs, shm, 2026-11-26) had recursive doubling 1.45x faster at 16 and
// 32 KiB in every run (2.6 against 3.8 us, 3.8 against 5.5), and within 2-7 % at 64-128 KiB;
// over TCP it was level at 16 KiB and 27 % slower at 64 KiB (docs/tuning.md).
constexpr std::size_t kAllreduceSmallBytesTwoRanks = 64u << 10;
constexpr std::size_t kAllreduceDirectBytes = 1u << 20;  // from here: direct
// From here: direct (one copy: from a registered source's mapping, else by cross-memory attach,
// the root writing 1/n itself when in place; broadcast/direct.cpp). Chosen for broadcast in
// place, as programs call it (`tandem-perf --tune` times broadcast in place). Measured on 2
// ranks (2026-11-27), in place / out of place: 32 KiB with -n 2000, four runs, 1.84-1.98
// against the tree's 2.15-2.50 us / 2.65-2.88 against 2.36-2.56 (the tree's root does not
// wait for the receiver, so out of place its calls overlap); with -n 200 the tree's in-place
// time is bimodal from run to run, 1.9 or 2.5-2.7 us, direct's 1.8-2.0 in five runs of six.
// 16 KiB stays with the tree (0.95-1.08 against 1.6-2.0 in place). 64 KiB 2.6-3.0 against
// 3.8-4.3 / 3.5-3.8 against 3.8-4.4. From 1 MiB (-n 30) against the ring: in place 1 MiB
// 18-20 against 53-58 us, 16 MiB 0.79-0.87 against 1.24-1.29 ms; out of place 1 MiB 50-70
// against 101-125 us, 64 MiB 13.4-14.9 against 14.2-14.9 ms.
constexpr std::size_t kBroadcastDirectBytes = 32u << 10;
constexpr std::size_t kReduceSmallBytes = 64u << 10;  // below: tree
// Result size; from here: direct (one copy from each peer's input: mapped when registered,
// else by cross-memory attach). Measured on 2 ranks: 16 KiB 1.85 against recursive doubling's
// 2.52 us, 128 KiB 4.9 against the ring's 9.1, 1 MiB 43 against 78; at 8 KiB the ring's 1.6
// against 1.7.
constexpr std::size_t kAllgatherDirectBytes = 16u << 10;
constexpr std::size_t kReduceScatterSmallBytes = 64u << 10;  // input size; below: recursive_halving
constexpr std::size_t kReduceScatterDirectBytes = 1u << 20;  // input size; from here: direct
constexpr std::size_t kGatherSmallBytes = 4u << 10;          // block size; below: binomial
constexpr int kGatherBinomialMinWorld = 8;                   // fewer ranks: linear is as good
// On 2 ranks reduce's ring (an exchange of halves, then a send to the root) lost to tree
// (one send) at every size from 64 KiB to 16 MiB, by 1.3-4x, over shared memory and TCP.
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
      if (bytes < (world == 2 ? kAllreduceSmallBytesTwoRanks : kAllreduceSmallBytes))
        return Names(kRdRing);
      // Across hosts the links between them are the bottleneck: keep traffic inside a host
      // where there is a host to keep it in (hierarchical supports() only such layouts).
      if (call.hosts != nullptr && call.hosts->spans_hosts()) return Names(kHierRing);
      return bytes >= kAllreduceDirectBytes ? Names(kDirectRing) : Names(kRingRab);
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
