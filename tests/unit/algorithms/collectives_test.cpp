// Every algorithm of every collective against an independent reference, on the fake mesh:
// world sizes 1..6 and 8, all dtypes, all ops where it reduces, awkward counts, in-place
// and out-of-place, several roots and pipelining chunk sizes.

#include "algorithms/algorithm.hpp"
#include "fake_mesh.hpp"
#include "values.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace tandem::testing {
namespace {

using algorithms::Algorithm;
using algorithms::Call;

struct Case {
  DataType dt = DataType::f32;
  ReduceOp op = ReduceOp::sum;
  std::size_t count = 0;  // elements per rank (per block for the gathering collectives)
  bool in_place = false;
  int root = 0;
  std::size_t chunk = 1u << 20;
  std::size_t segment = 0;  // Context::segment_bytes (ring allreduce)
  std::uint64_t seq = 0;
};

bool reduces(CollectiveKind k) {
  return k == CollectiveKind::allreduce || k == CollectiveKind::reduce ||
         k == CollectiveKind::reduce_scatter;
}
bool rooted(CollectiveKind k) {
  return k == CollectiveKind::broadcast || k == CollectiveKind::reduce ||
         k == CollectiveKind::gather || k == CollectiveKind::scatter;
}
bool replicated(CollectiveKind k) {
  return k == CollectiveKind::allreduce || k == CollectiveKind::broadcast ||
         k == CollectiveKind::allgather || k == CollectiveKind::allgatherv;
}

// Pipelining chunk sizes (bytes, multiples of 64), cycled through the cases.
constexpr std::size_t kChunks[] = {64, 448, 4096, 1u << 20};
// Segment sizes per rank (bytes; 0: none), cycled too: 3 against 4 chunk sizes, so every
// pairing occurs.
constexpr std::size_t kSegments[] = {0, 100, 1000};

std::vector<Case> make_cases(CollectiveKind kind, int n) {
  std::vector<int> roots{0};
  if (rooted(kind)) roots = {0, n - 1, n / 2};
  std::sort(roots.begin(), roots.end());
  roots.erase(std::unique(roots.begin(), roots.end()), roots.end());
  std::vector<ReduceOp> ops{ReduceOp::sum};
  if (reduces(kind)) ops.assign(std::begin(kAllReduceOps), std::end(kAllReduceOps));

  std::vector<Case> cases;
  std::uint64_t seq = 0;
  const auto add = [&](DataType dt, ReduceOp op, std::size_t count, bool in_place, int root) {
    // At most ~8 chunks per message: enough to pipeline, few enough to stay fast.
    const std::size_t share = count * dtype_size(dt) / 8 / 64 * 64;
    // And at most ~8 segments.
    const std::size_t seg = kSegments[seq % std::size(kSegments)];
    const std::size_t seg_share = count * dtype_size(dt) / 8 / static_cast<std::size_t>(n);
    Case c{dt,
           op,
           count,
           in_place,
           root,
           std::max(kChunks[seq % std::size(kChunks)], share),
           seg == 0 ? 0 : std::max(seg, seg_share),
           seq};
    ++seq;
    cases.push_back(c);
  };
  // Every dtype x op for a few counts (roots cycled).
  const std::size_t few[] = {0, 1, static_cast<std::size_t>(n) + 1, 1000};
  std::vector<ReduceOp> bitwise;
  if (reduces(kind)) bitwise.assign(std::begin(kBitwiseReduceOps), std::end(kBitwiseReduceOps));
  for (DataType dt : kAllDataTypes) {
    for (ReduceOp op : ops)
      for (std::size_t count : few)
        for (bool in_place : {false, true}) add(dt, op, count, in_place, roots[seq % roots.size()]);
    if (is_floating(dt)) continue;
    for (ReduceOp op : bitwise)
      for (std::size_t count : few)
        for (bool in_place : {false, true}) add(dt, op, count, in_place, roots[seq % roots.size()]);
  }
  // Every count for two (dtype, op) pairs, every root.
  const std::size_t all[] = {0,
                             1,
                             2,
                             3,
                             5,
                             7,
                             13,
                             static_cast<std::size_t>(n - 1),
                             static_cast<std::size_t>(n + 1),
                             1000,
                             4099,
                             65537};
  const std::pair<DataType, ReduceOp> pairs[] = {{DataType::f32, ReduceOp::sum},
                                                 {DataType::i32, ReduceOp::max}};
  for (auto [dt, op] : pairs)
    for (std::size_t count : all)
      for (bool in_place : {false, true})
        for (int root : roots) add(dt, reduces(kind) ? op : ReduceOp::sum, count, in_place, root);
  return cases;
}

// Counts of allgatherv: uneven, with empty blocks.
std::size_t vcount(std::size_t c, int j) {
  if (j % 4 == 3) return 0;
  return c + static_cast<std::size_t>(j) * (c / 3 + 1);
}

/// Buffers, call and verification of one case on one rank.
class RankCase {
 public:
  RankCase(CollectiveKind kind, const Case& c, int n, int r) : kind_(kind), c_(c), n_(n), r_(r) {
    prepare();
  }

  Call call() const {
    Call call;
    call.kind = kind_;
    call.in = in_;
    call.out = out_;
    call.op = c_.op;
    call.root = c_.root;
    call.counts = counts_;
    call.seq = c_.seq;
    call.tag = algorithms::fingerprint(kind_, c_.dt, c_.count, c_.root, c_.seq);
    // Only a hang should reach it: six threads on two busy cores move the fake mesh's random
    // pieces slowly, and a case of w6/w8 has taken over 20 s on a loaded machine.
    call.deadline = deadline_in(std::chrono::seconds(120));
    return call;
  }

  /// "" when right; the hash of the replicated output goes to `hash`.
  std::string verify(std::uint64_t& hash);

 private:
  std::size_t es() const { return dtype_size(c_.dt); }
  std::size_t nc() const { return static_cast<std::size_t>(n_) * c_.count; }
  BufferView view(Buffer& b, std::size_t offset, std::size_t count) {
    return BufferView::raw(b.data() + offset * es(), count, c_.dt);
  }
  Buffer& make(std::optional<Buffer>& slot, std::size_t elems) {
    slot.emplace(elems * es());
    return *slot;
  }
  void fill_reduce(Buffer& b, std::size_t offset, std::size_t count) {
    for (std::size_t i = 0; i < count; ++i)
      put(c_.dt, b.data(), offset + i, reduce_input(c_.dt, c_.op, n_, r_, i, c_.seq));
  }
  void fill_move(Buffer& b, std::size_t offset, std::size_t count, int rank, std::size_t first) {
    for (std::size_t i = 0; i < count; ++i)
      put(c_.dt, b.data(), offset + i, move_input(c_.dt, rank, first + i));
  }
  std::string check_reduce_input(Buffer& b, std::size_t offset, std::size_t count) {
    auto s = compare(c_.dt, b.data() + offset * es(), count,
                     [&](std::size_t i) { return reduce_input(c_.dt, c_.op, n_, r_, i, c_.seq); });
    return s.empty() ? s : "input modified: " + s;
  }
  std::string check_move_input(Buffer& b, std::size_t count, int rank) {
    auto s =
        compare(c_.dt, b.data(), count, [&](std::size_t i) { return move_input(c_.dt, rank, i); });
    return s.empty() ? s : "input modified: " + s;
  }
  static std::string check_untouched(Buffer& b) {
    for (std::size_t i = 0; i < b.bytes(); ++i)
      if (b.data()[i] != std::byte{0x5a})
        return fmt::format("untouched buffer written at byte {}", i);
    return {};
  }
  void prepare();

  CollectiveKind kind_;
  Case c_;
  int n_;
  int r_;
  std::optional<Buffer> a_;
  std::optional<Buffer> b_;
  BufferView in_;
  BufferView out_;
  std::vector<std::size_t> counts_;
  std::vector<std::size_t> offsets_;
};

void RankCase::prepare() {
  const std::size_t c = c_.count;
  const bool root = r_ == c_.root;
  switch (kind_) {
    case CollectiveKind::allreduce:
      fill_reduce(make(a_, c), 0, c);
      in_ = view(*a_, 0, c);
      out_ = c_.in_place ? in_ : view(make(b_, c), 0, c);
      break;
    case CollectiveKind::broadcast:
      make(a_, c);
      if (root) fill_move(*a_, 0, c, r_, 0);
      in_ = view(*a_, 0, c);
      out_ = c_.in_place ? in_ : view(make(b_, c), 0, c);
      break;
    case CollectiveKind::reduce:
      fill_reduce(make(a_, c), 0, c);
      in_ = view(*a_, 0, c);
      out_ = c_.in_place ? in_ : view(make(b_, c), 0, c);
      break;
    case CollectiveKind::allgather:
      if (c_.in_place) {
        fill_move(make(a_, nc()), static_cast<std::size_t>(r_) * c, c, r_, 0);
        in_ = view(*a_, static_cast<std::size_t>(r_) * c, c);
        out_ = view(*a_, 0, nc());
      } else {
        fill_move(make(a_, c), 0, c, r_, 0);
        in_ = view(*a_, 0, c);
        out_ = view(make(b_, nc()), 0, nc());
      }
      break;
    case CollectiveKind::allgatherv: {
      for (int j = 0; j < n_; ++j) counts_.push_back(vcount(c, j));
      offsets_.assign(1, 0);
      for (std::size_t x : counts_) offsets_.push_back(offsets_.back() + x);
      const std::size_t mine = counts_[static_cast<std::size_t>(r_)];
      const std::size_t at = offsets_[static_cast<std::size_t>(r_)];
      if (c_.in_place) {
        fill_move(make(a_, offsets_.back()), at, mine, r_, 0);
        in_ = view(*a_, at, mine);
        out_ = view(*a_, 0, offsets_.back());
      } else {
        fill_move(make(a_, mine), 0, mine, r_, 0);
        in_ = view(*a_, 0, mine);
        out_ = view(make(b_, offsets_.back()), 0, offsets_.back());
      }
      break;
    }
    case CollectiveKind::reduce_scatter:
      fill_reduce(make(a_, nc()), 0, nc());
      in_ = view(*a_, 0, nc());
      out_ = c_.in_place ? view(*a_, static_cast<std::size_t>(r_) * c, c) : view(make(b_, c), 0, c);
      break;
    case CollectiveKind::alltoall:
      fill_move(make(a_, nc()), 0, nc(), r_, 0);
      in_ = view(*a_, 0, nc());
      out_ = c_.in_place ? in_ : view(make(b_, nc()), 0, nc());
      break;
    case CollectiveKind::gather:
      if (root && c_.in_place) {
        fill_move(make(a_, nc()), static_cast<std::size_t>(r_) * c, c, r_, 0);
        in_ = view(*a_, static_cast<std::size_t>(r_) * c, c);
        out_ = view(*a_, 0, nc());
      } else {
        fill_move(make(a_, c), 0, c, r_, 0);
        in_ = view(*a_, 0, c);
        out_ = view(make(b_, nc()), 0, nc());
      }
      break;
    case CollectiveKind::scatter:
      make(a_, nc());
      if (root) fill_move(*a_, 0, nc(), r_, 0);
      in_ = view(*a_, 0, nc());
      out_ = root && c_.in_place ? view(*a_, static_cast<std::size_t>(r_) * c, c)
                                 : view(make(b_, c), 0, c);
      break;
    default:
      break;
  }
}

std::string RankCase::verify(std::uint64_t& hash) {
  const std::size_t c = c_.count;
  const bool root = r_ == c_.root;
  const auto ref = [&](std::size_t i) { return reduce_reference(c_.dt, c_.op, n_, i, c_.seq); };
  std::string err;
  const auto also = [&](std::string s) {
    if (err.empty()) err = std::move(s);
  };
  switch (kind_) {
    case CollectiveKind::allreduce:
      also(compare(c_.dt, out_.data, c, ref));
      if (!c_.in_place) also(check_reduce_input(*a_, 0, c));
      break;
    case CollectiveKind::broadcast:
      also(compare(c_.dt, out_.data, c,
                   [&](std::size_t i) { return move_input(c_.dt, c_.root, i); }));
      if (root && !c_.in_place) also(check_move_input(*a_, c, r_));
      break;
    case CollectiveKind::reduce:
      if (root) also(compare(c_.dt, out_.data, c, ref));
      if (!root || !c_.in_place) also(check_reduce_input(*a_, 0, c));
      if (!root && !c_.in_place) also(check_untouched(*b_));
      break;
    case CollectiveKind::allgather:
      also(compare(c_.dt, out_.data, nc(), [&](std::size_t i) {
        return move_input(c_.dt, static_cast<int>(i / c), i % c);
      }));
      if (!c_.in_place) also(check_move_input(*a_, c, r_));
      break;
    case CollectiveKind::allgatherv:
      also(compare(c_.dt, out_.data, offsets_.back(), [&](std::size_t i) {
        const auto j = std::upper_bound(offsets_.begin(), offsets_.end(), i) - offsets_.begin() - 1;
        return move_input(c_.dt, static_cast<int>(j), i - offsets_[static_cast<std::size_t>(j)]);
      }));
      if (!c_.in_place) also(check_move_input(*a_, counts_[static_cast<std::size_t>(r_)], r_));
      break;
    case CollectiveKind::reduce_scatter:
      also(compare(c_.dt, out_.data, c,
                   [&](std::size_t i) { return ref(static_cast<std::size_t>(r_) * c + i); }));
      if (!c_.in_place) also(check_reduce_input(*a_, 0, nc()));
      break;
    case CollectiveKind::alltoall:
      also(compare(c_.dt, out_.data, nc(), [&](std::size_t i) {
        return move_input(c_.dt, static_cast<int>(i / c), static_cast<std::size_t>(r_) * c + i % c);
      }));
      if (!c_.in_place) also(check_move_input(*a_, nc(), r_));
      break;
    case CollectiveKind::gather:
      if (root) {
        also(compare(c_.dt, out_.data, nc(), [&](std::size_t i) {
          return move_input(c_.dt, static_cast<int>(i / c), i % c);
        }));
      } else {
        also(check_untouched(*b_));
      }
      if (!(root && c_.in_place)) also(check_move_input(*a_, c, r_));
      break;
    case CollectiveKind::scatter:
      also(compare(c_.dt, out_.data, c, [&](std::size_t i) {
        return move_input(c_.dt, c_.root, static_cast<std::size_t>(r_) * c + i);
      }));
      if (root) also(check_move_input(*a_, nc(), r_));
      break;
    default:
      break;
  }
  if (a_ && !a_->guards_intact()) also("write outside the input/output buffer");
  if (b_ && !b_->guards_intact()) also("write outside the output buffer");
  hash = replicated(kind_) ? hash_bytes(out_.data, out_.bytes()) : 0;
  return err;
}

struct Param {
  CollectiveKind kind;
  std::string algorithm;
  int world;
};

// What ctest shows beside each case's name (instead of the parameter's raw bytes).
void PrintTo(const Param& p, std::ostream* os) {
  *os << to_string(p.kind) << ' ' << p.algorithm << " on " << p.world << " ranks";
}

std::vector<Param> all_params() {
  const CollectiveKind kinds[] = {
      CollectiveKind::allreduce, CollectiveKind::broadcast,  CollectiveKind::reduce,
      CollectiveKind::allgather, CollectiveKind::allgatherv, CollectiveKind::reduce_scatter,
      CollectiveKind::alltoall,  CollectiveKind::gather,     CollectiveKind::scatter};
  std::vector<Param> out;
  for (CollectiveKind k : kinds)
    for (const Algorithm* a : algorithms::Registry::builtin().of(k))
      for (int w : {1, 2, 3, 4, 5, 6, 8}) out.push_back({k, std::string(a->name()), w});
  return out;
}

class Collectives : public ::testing::TestWithParam<Param> {};

// For host-aware algorithms: n ranks as if on H hosts, rank r on host r % H (so a host's ranks
// are not contiguous), with H the smallest divisor that leaves every host 2 ranks or more and,
// where it differs, the largest (more hosts: the hierarchical allreduce's tree between hosts
// for small blocks). Empty where n has no such layout (the algorithm then has nothing to do).
std::vector<std::unique_ptr<algorithms::HostLayout>> emulated_hosts(int n) {
  std::vector<int> divisors;
  for (int h = 2; h * 2 <= n; ++h)
    if (n % h == 0) divisors.push_back(h);
  std::vector<std::unique_ptr<algorithms::HostLayout>> layouts;
  if (divisors.empty()) return layouts;
  for (int h : {divisors.front(), divisors.back()}) {
    if (!layouts.empty() && layouts.front()->hosts == h) break;
    auto layout = std::make_unique<algorithms::HostLayout>();
    for (int r = 0; r < n; ++r) layout->host_of.push_back(r % h);
    layout->hosts = h;
    layout->ranks_per_host = n / h;
    layouts.push_back(std::move(layout));
  }
  return layouts;
}

TEST_P(Collectives, MatchReference) {
  const Param& p = GetParam();
  const Algorithm* alg = algorithms::Registry::builtin().find(p.kind, p.algorithm);
  ASSERT_NE(alg, nullptr);
  const int n = p.world;
  const std::vector<Case> cases = make_cases(p.kind, n);
  FakeOptions options;
  options.seed = std::hash<std::string>{}(p.algorithm) ^
                 static_cast<std::uint64_t>(n * 7919 + static_cast<int>(p.kind));
  FakeWorld world(n, options);
  const auto hosts = emulated_hosts(n);

  std::mutex mu;
  std::vector<std::string> failures;
  std::vector<std::vector<std::uint64_t>> hashes(
      cases.size(), std::vector<std::uint64_t>(static_cast<std::size_t>(n)));
  std::size_t ran = 0;
  const auto errors = world.run([&](int r, transport::Mesh& mesh) {
    algorithms::Scratch scratch;
    std::size_t mine = 0;
    for (std::size_t ci = 0; ci < cases.size(); ++ci) {
      const Case& c = cases[ci];
      RankCase rc(p.kind, c, n, r);
      Call call = rc.call();
      // Every rank sees the same layout for a case: they alternate from case to case.
      call.hosts = hosts.empty() ? nullptr : hosts[ci % hosts.size()].get();
      if (!alg->supports(call, n)) continue;
      algorithms::Context ctx{mesh, scratch, c.chunk};
      ctx.segment_bytes = c.segment;
      alg->run(call, ctx);
      std::string err = rc.verify(hashes[ci][static_cast<std::size_t>(r)]);
      if (world.pending(r) != 0)
        err += fmt::format(" ({} requests still pending)", world.pending(r));
      ++mine;
      if (!err.empty()) {
        std::lock_guard lk(mu);
        if (failures.size() < 20)
          failures.push_back(fmt::format(
              "rank {} case #{} ({} {} count {} {} root {} chunk {} segment {}): {}", r, ci,
              to_string(c.dt), to_string(c.op), c.count, c.in_place ? "in-place" : "out-of-place",
              c.root, c.chunk, c.segment, err));
      }
    }
    if (r == 0) ran = mine;
  });
  for (std::size_t r = 0; r < errors.size(); ++r)
    if (errors[r]) ADD_FAILURE() << "rank " << r << " threw: " << describe(errors[r]);
  for (const auto& f : failures) ADD_FAILURE() << f;
  EXPECT_TRUE(world.idle()) << "messages or requests left in the channels";
  if (replicated(p.kind)) {
    for (std::size_t ci = 0; ci < cases.size(); ++ci)
      for (int r = 1; r < n; ++r)
        EXPECT_EQ(hashes[ci][static_cast<std::size_t>(r)], hashes[ci][0])
            << "case #" << ci << ": rank " << r << " differs from rank 0";
  }
  // An algorithm that runs nowhere must say why: only power-of-two ones may skip, and
  // host-aware ones where the ranks cannot be laid out on several hosts.
  if (ran == 0) {
    EXPECT_TRUE(((n & (n - 1)) != 0 && p.algorithm != "hierarchical") ||
                (p.algorithm == "hierarchical" && hosts.empty()))
        << p.algorithm << " skipped every case on " << n << " ranks";
  }
}

// Random collectives back to back on one world, each with a randomly chosen algorithm (the
// same on every rank), as a communicator issues them: no message of one call may leak into
// the next.
// TANDEM_CHUNK_SIZE's effect (Context::chunk_bytes): a pipelined algorithm cuts a message
// into that many messages. The root of a 3-rank tree broadcast of 1 MiB sends 16 chunks of
// 64 KiB to each child, or the whole message at once with 1 MiB chunks; either is correct.
TEST(ChunkSize, CutsPipelinedMessagesIntoChunks) {
  const Algorithm* tree = algorithms::Registry::builtin().find(CollectiveKind::broadcast, "tree");
  ASSERT_NE(tree, nullptr);
  for (const std::size_t chunk : {std::size_t{64} << 10, std::size_t{1} << 20}) {
    FakeWorld world(3);
    constexpr std::size_t kCount = (1u << 20) / 4;
    std::vector<std::vector<float>> bufs(3, std::vector<float>(kCount));
    for (std::size_t i = 0; i < kCount; ++i) bufs[0][i] = static_cast<float>(i % 1000);
    const auto errors = world.run([&](int r, transport::Mesh& mesh) {
      algorithms::Scratch scratch;
      auto& b = bufs[static_cast<std::size_t>(r)];
      Call call;
      call.kind = CollectiveKind::broadcast;
      call.in = call.out = BufferView::of(std::span<float>(b));
      call.root = 0;
      call.deadline = deadline_in(std::chrono::seconds(60));
      algorithms::Context ctx{mesh, scratch, chunk};
      tree->run(call, ctx);
    });
    for (const auto& e : errors) EXPECT_FALSE(e) << describe(e);
    EXPECT_EQ(world.sends_posted(0), 2 * ((1u << 20) / chunk)) << "chunk " << chunk;
    EXPECT_EQ(bufs[2], bufs[0]);
  }
}

TEST(CollectiveSequence, MixedKindsAndAlgorithms) {
  const CollectiveKind kinds[] = {
      CollectiveKind::allreduce, CollectiveKind::broadcast,  CollectiveKind::reduce,
      CollectiveKind::allgather, CollectiveKind::allgatherv, CollectiveKind::reduce_scatter,
      CollectiveKind::alltoall,  CollectiveKind::gather,     CollectiveKind::scatter};
  const std::size_t counts[] = {0, 1, 3, 17, 255, 1000, 5003};
  for (int n : {3, 4, 7}) {
    struct Step {
      CollectiveKind kind;
      const Algorithm* alg;
      Case c;
    };
    std::mt19937_64 rng(static_cast<std::uint64_t>(n));
    std::vector<Step> steps;
    for (std::uint64_t seq = 0; seq < 150; ++seq) {
      Step st;
      st.kind = kinds[rng() % std::size(kinds)];
      const auto algs = algorithms::Registry::builtin().of(st.kind);
      st.alg = algs[rng() % algs.size()];
      st.c.dt = kAllDataTypes[rng() % std::size(kAllDataTypes)];
      st.c.op = reduces(st.kind) ? kAllReduceOps[rng() % std::size(kAllReduceOps)] : ReduceOp::sum;
      st.c.count = counts[rng() % std::size(counts)];
      st.c.in_place = rng() % 2 == 0;
      st.c.root = static_cast<int>(rng() % static_cast<std::uint64_t>(n));
      st.c.chunk = kChunks[rng() % std::size(kChunks)];
      st.c.segment = kSegments[rng() % std::size(kSegments)];
      st.c.seq = seq;
      steps.push_back(st);
    }
    FakeWorld world(n, FakeOptions{.seed = 99});
    std::mutex mu;
    std::vector<std::string> failures;
    const auto errors = world.run([&](int r, transport::Mesh& mesh) {
      algorithms::Scratch scratch;
      for (const Step& st : steps) {
        RankCase rc(st.kind, st.c, n, r);
        const Call call = rc.call();
        if (!st.alg->supports(call, n)) continue;  // the same decision on every rank
        algorithms::Context ctx{mesh, scratch, st.c.chunk};
        ctx.segment_bytes = st.c.segment;
        st.alg->run(call, ctx);
        std::uint64_t hash = 0;
        if (std::string err = rc.verify(hash); !err.empty()) {
          std::lock_guard lk(mu);
          failures.push_back(fmt::format("{} ranks, #{} {} {}: rank {}: {}", n, st.c.seq,
                                         to_string(st.kind), st.alg->name(), r, err));
        }
      }
    });
    for (const auto& e : errors) EXPECT_EQ(e, nullptr) << describe(e);
    for (const auto& f : failures) ADD_FAILURE() << f;
    EXPECT_TRUE(world.idle());
  }
}

INSTANTIATE_TEST_SUITE_P(All, Collectives, ::testing::ValuesIn(all_params()),
                         [](const ::testing::TestParamInfo<Param>& pi) {
                           return fmt::format("{}_{}_w{}", to_string(pi.param.kind),
                                              pi.param.algorithm, pi.param.world);
                         });

}  // namespace
}  // namespace tandem::testing
