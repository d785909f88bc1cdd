// DistributedSampler with torch.utils.data.DistributedSampler's arithmetic, over a
// generator of our own whose output is fixed by its definition (std::uniform_int_distribution
// is not: it differs between standard libraries, and every rank must agree).

#include <tandem/data.hpp>
#include <tandem/error.hpp>

#include <algorithm>
#include <numeric>

namespace tandem::data {

namespace {

__extension__ using U128 = unsigned __int128;

std::uint64_t splitmix64(std::uint64_t& s) noexcept {
  std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// xoshiro256** (Blackman and Vigna), seeded through SplitMix64 as its authors recommend.
class Xoshiro256 {
 public:
  explicit Xoshiro256(std::uint64_t seed) noexcept {
    for (auto& w : s_) w = splitmix64(seed);
  }
  std::uint64_t operator()() noexcept {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  /// Uniform in [0, bound), unbiased (Lemire's multiply-and-reject).
  std::uint64_t below(std::uint64_t bound) noexcept {
    U128 m = static_cast<U128>((*this)()) * bound;
    auto low = static_cast<std::uint64_t>(m);
    if (low < bound) {
      const std::uint64_t threshold = (0 - bound) % bound;
      while (low < threshold) {
        m = static_cast<U128>((*this)()) * bound;
        low = static_cast<std::uint64_t>(m);
      }
    }
    return static_cast<std::uint64_t>(m >> 64);
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4]{};
};

}  // namespace

std::vector<std::size_t> permutation(std::size_t n, std::uint64_t seed) {
  std::vector<std::size_t> p(n);
  std::iota(p.begin(), p.end(), std::size_t{0});
  Xoshiro256 rng(seed);
  for (std::size_t i = n; i > 1; --i) {
    const auto j = static_cast<std::size_t>(rng.below(i));
    std::swap(p[i - 1], p[j]);
  }
  return p;
}

DistributedSampler::DistributedSampler(std::size_t dataset_size, int num_replicas, int rank,
                                       SamplerOptions options)
    : dataset_size_(dataset_size), replicas_(num_replicas), rank_(rank), options_(options) {
  TANDEM_CHECK_ARG(num_replicas > 0, "DistributedSampler: num_replicas must be positive, got {}",
                   num_replicas);
  TANDEM_CHECK_ARG(rank >= 0 && rank < num_replicas,
                   "DistributedSampler: invalid rank {}, rank should be in the interval [0, {}]",
                   rank, num_replicas - 1);
  size_epoch();
}

void DistributedSampler::size_epoch() {
  const auto r = static_cast<std::size_t>(replicas_);
  const std::size_t n = dataset_size_ - static_cast<std::size_t>(offset_);
  // PyTorch: drop_last and N % R != 0 -> ceil((N - R) / R) = floor(N / R); else ceil(N / R).
  num_samples_ = options_.drop_last ? n / r : (n + r - 1) / r;
}

void DistributedSampler::set_epoch(std::uint64_t epoch) {
  if (epoch != epoch_) {
    position_ = 0;
    if (offset_ != 0) {
      offset_ = 0;
      size_epoch();
    }
  }
  epoch_ = epoch;
}

std::uint64_t DistributedSampler::consumed() const noexcept {
  return std::min<std::uint64_t>(dataset_size_,
                                 offset_ + position_ * static_cast<std::uint64_t>(replicas_));
}

std::vector<std::size_t> DistributedSampler::epoch_order() const {
  std::vector<std::size_t> order;
  if (options_.shuffle) {
    order = permutation(dataset_size_, options_.seed + epoch_);
  } else {
    order.resize(dataset_size_);
    std::iota(order.begin(), order.end(), std::size_t{0});
  }
  // An epoch resumed at another world size: what the earlier sharding consumed is gone.
  order.erase(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(offset_));
  const std::size_t total = total_size();
  if (order.size() >= total) {
    order.resize(total);  // drop_last: the tail goes
  } else if (!order.empty()) {
    // Pad by repeating the order from its start, cyclically when the padding is longer.
    const std::size_t n = order.size();
    order.reserve(total);
    for (std::size_t i = 0; order.size() < total; ++i) order.push_back(order[i % n]);
  }
  return order;
}

std::vector<std::size_t> DistributedSampler::indices() const {
  const auto order = epoch_order();
  std::vector<std::size_t> mine;
  mine.reserve(num_samples_);
  for (std::size_t i = static_cast<std::size_t>(rank_); i < order.size();
       i += static_cast<std::size_t>(replicas_))
    mine.push_back(order[i]);
  return mine;
}

std::vector<std::size_t> DistributedSampler::remaining() const {
  auto all = indices();
  all.erase(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(
                                           std::min<std::uint64_t>(position_, all.size())));
  return all;
}

void DistributedSampler::advance(std::uint64_t n) noexcept {
  position_ =
      std::min<std::uint64_t>(position_ + std::min<std::uint64_t>(n, num_samples_), num_samples_);
}

void DistributedSampler::load_state(const SamplerState& state) {
  TANDEM_CHECK_ARG(state.seed == options_.seed,
                   "DistributedSampler::load_state: the saved state has seed {} but this sampler "
                   "seed {}: construct the sampler with the seed of the run being resumed",
                   state.seed, options_.seed);
  TANDEM_CHECK_ARG(state.offset <= dataset_size_,
                   "DistributedSampler::load_state: offset {} exceeds the dataset size {}: was "
                   "the checkpoint written for another dataset?",
                   state.offset, dataset_size_);
  const auto replicas = static_cast<std::uint64_t>(replicas_);
  epoch_ = state.epoch;
  if (state.replicas == 0 || state.replicas == replicas) {
    offset_ = state.offset;
    size_epoch();
    TANDEM_CHECK_ARG(state.position <= num_samples_,
                     "DistributedSampler::load_state: position {} exceeds the {} samples per "
                     "rank of this sampler (dataset size {}, {} replicas): was the checkpoint "
                     "written for another dataset?",
                     state.position, num_samples_, dataset_size_, replicas_);
    position_ = state.position;
    return;
  }
  // Saved at another world size: the first `consumed` samples of the epoch's order are done.
  const std::uint64_t consumed =
      std::min<std::uint64_t>(dataset_size_, state.offset + state.position * state.replicas);
  offset_ = consumed;
  position_ = 0;
  size_epoch();
}

}  // namespace tandem::data
