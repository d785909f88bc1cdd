// The registry and its default choice by size, fingerprints and scratch memory (forced and
// per-call choices: comm/policy_test.cpp).

#include "algorithms/algorithm.hpp"

#include <tandem/error.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace tandem::algorithms {
namespace {

const Registry& reg() {
  return Registry::builtin();
}

/// A call of `kind` whose selector-relevant size is `bytes` (f32 elements).
Call shaped(CollectiveKind kind, std::size_t bytes, int world) {
  static float dummy[2];
  Call c;
  c.kind = kind;
  const std::size_t n = bytes / sizeof(float);
  const auto w = static_cast<std::size_t>(world);
  std::size_t in = n;
  std::size_t out = n;
  switch (kind) {
    case CollectiveKind::allgather:
    case CollectiveKind::gather:
      out = n;
      in = n / w;
      break;
    case CollectiveKind::reduce_scatter:
      in = n;
      out = n / w;
      break;
    case CollectiveKind::scatter:
      out = n;
      in = n * w;
      break;
    default:
      break;
  }
  c.in = BufferView::raw(&dummy[0], in, DataType::f32);
  c.out = BufferView::raw(&dummy[1], out, DataType::f32);
  return c;
}

std::string_view pick(CollectiveKind kind, std::size_t bytes, int world) {
  return reg().default_choice(shaped(kind, bytes, world), world).name();
}

Call of_kind(CollectiveKind kind) {
  Call c;
  c.kind = kind;
  return c;
}

ErrorCode code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::Internal;  // "did not throw" never equals the codes tested for
}

TEST(Registry, HasEveryCollective) {
  const std::pair<CollectiveKind, std::vector<std::string>> expected[] = {
      {CollectiveKind::allreduce,
       {"ring", "recursive_doubling", "tree", "rabenseifner", "hierarchical", "direct"}},
      {CollectiveKind::broadcast, {"tree", "ring", "direct"}},
      {CollectiveKind::reduce, {"tree", "ring"}},
      {CollectiveKind::allgather, {"ring", "recursive_doubling", "bruck", "direct"}},
      {CollectiveKind::allgatherv, {"ring"}},
      {CollectiveKind::reduce_scatter, {"ring", "recursive_halving", "direct"}},
      {CollectiveKind::alltoall, {"pairwise"}},
      {CollectiveKind::gather, {"linear", "binomial"}},
      {CollectiveKind::scatter, {"linear", "binomial"}},
      {CollectiveKind::barrier, {"dissemination"}},
      {CollectiveKind::send, {"direct"}},
      {CollectiveKind::recv, {"direct"}},
  };
  for (const auto& [kind, names] : expected) {
    std::vector<std::string> got;
    for (const Algorithm* a : reg().of(kind)) {
      EXPECT_EQ(a->kind(), kind);
      got.emplace_back(a->name());
    }
    EXPECT_EQ(got, names) << to_string(kind);
    for (const auto& name : names) EXPECT_NE(reg().find(kind, name), nullptr) << name;
  }
  EXPECT_EQ(reg().find(CollectiveKind::allreduce, "RING"),
            reg().find(CollectiveKind::allreduce, "ring"));
  EXPECT_EQ(reg().find(CollectiveKind::allreduce, "bruck"), nullptr);
  EXPECT_EQ(reg().find(CollectiveKind::barrier, "ring"), nullptr);
}

TEST(Registry, AddRejectsDuplicates) {
  Registry r;
  struct Dummy final : Algorithm {
    Dummy() : Algorithm(CollectiveKind::barrier, "dummy") {}
    void run(const Call&, Context&) const override {}
  };
  r.add(std::make_unique<Dummy>());
  EXPECT_EQ(r.of(CollectiveKind::barrier).size(), 1u);
  EXPECT_THROW(r.add(std::make_unique<Dummy>()), Error);
  EXPECT_EQ(r.default_choice(of_kind(CollectiveKind::barrier), 4).name(), "dummy");
  EXPECT_EQ(code_of([&] { r.default_choice(of_kind(CollectiveKind::allreduce), 4); }),
            ErrorCode::InvalidArgument);
}

TEST(DefaultChoice, PicksBySize) {
  EXPECT_EQ(pick(CollectiveKind::allreduce, 8, 4), "recursive_doubling");
  EXPECT_EQ(pick(CollectiveKind::allreduce, 16 * 1024 - 4, 4), "recursive_doubling");
  EXPECT_EQ(pick(CollectiveKind::allreduce, 16 * 1024, 4), "ring");
  // On 2 ranks recursive doubling (one exchange) up to 64 KiB: measured faster at 16-32 KiB.
  EXPECT_EQ(pick(CollectiveKind::allreduce, 32 * 1024, 2), "recursive_doubling");
  EXPECT_EQ(pick(CollectiveKind::allreduce, 64 * 1024, 2), "ring");
  EXPECT_EQ(pick(CollectiveKind::allreduce, 1024 * 1024 - 4, 3), "ring");
  // From 1 MiB: one-copy when the buffers are registered everywhere, else a ring inside.
  EXPECT_EQ(pick(CollectiveKind::allreduce, 1024 * 1024, 3), "direct");
  EXPECT_EQ(pick(CollectiveKind::allreduce, 64 << 20, 3), "direct");
  EXPECT_EQ(pick(CollectiveKind::broadcast, 1024, 5), "tree");
  EXPECT_EQ(pick(CollectiveKind::broadcast, (32 << 10) - 4, 5), "tree");
  // From 32 KiB: one copy (mapped when registered, else cross-memory attach) at every size.
  EXPECT_EQ(pick(CollectiveKind::broadcast, 32 << 10, 5), "direct");
  EXPECT_EQ(pick(CollectiveKind::broadcast, 32 << 10, 2), "direct");
  EXPECT_EQ(pick(CollectiveKind::broadcast, 1 << 20, 5), "direct");
  EXPECT_EQ(pick(CollectiveKind::broadcast, 256 << 20, 2), "direct");
  EXPECT_EQ(pick(CollectiveKind::reduce, 1024, 5), "tree");
  EXPECT_EQ(pick(CollectiveKind::reduce, 1 << 20, 5), "ring");
  EXPECT_EQ(pick(CollectiveKind::reduce, 64 << 20, 2), "tree");  // measured: tree on 2 ranks
  // Power-of-two-only algorithms fall back on other world sizes.
  EXPECT_EQ(pick(CollectiveKind::allgather, 1024, 4), "recursive_doubling");
  EXPECT_EQ(pick(CollectiveKind::allgather, 1020, 3), "bruck");
  EXPECT_EQ(pick(CollectiveKind::allgather, (16 << 10) - 4, 4), "recursive_doubling");
  // From 16 KiB of result: one copy from each peer's input (mapped or cross-memory attach).
  EXPECT_EQ(pick(CollectiveKind::allgather, 16 << 10, 4), "direct");
  EXPECT_EQ(pick(CollectiveKind::allgather, 4 << 20, 4), "direct");
  EXPECT_EQ(pick(CollectiveKind::reduce_scatter, 1024, 8), "recursive_halving");
  EXPECT_EQ(pick(CollectiveKind::reduce_scatter, 1020, 6), "ring");
  EXPECT_EQ(pick(CollectiveKind::reduce_scatter, 512 << 10, 8), "ring");
  EXPECT_EQ(pick(CollectiveKind::reduce_scatter, 4 << 20, 8), "direct");
  EXPECT_EQ(pick(CollectiveKind::gather, 64, 8), "binomial");
  EXPECT_EQ(pick(CollectiveKind::gather, 64, 4), "linear");
  EXPECT_EQ(pick(CollectiveKind::scatter, 1 << 20, 8), "linear");
  EXPECT_EQ(pick(CollectiveKind::alltoall, 1 << 20, 8), "pairwise");
  EXPECT_EQ(pick(CollectiveKind::barrier, 0, 8), "dissemination");
  EXPECT_EQ(pick(CollectiveKind::send, 8, 2), "direct");
  EXPECT_EQ(pick(CollectiveKind::recv, 8, 2), "direct");
  EXPECT_EQ(pick(CollectiveKind::allreduce, 8, 1), "recursive_doubling");
}

TEST(DefaultChoice, ChoiceDependsOnlyOnTheSizeClass) {
  // Communicators cache the choice per (collective, dtype, size class): every size of a class
  // must get what its smallest size gets, on any world size.
  for (std::size_t k = 0; k <= static_cast<std::size_t>(CollectiveKind::barrier); ++k) {
    const auto kind = static_cast<CollectiveKind>(k);
    if (kind == CollectiveKind::allgatherv) continue;  // needs counts: one algorithm anyway
    for (int world : {2, 3, 4, 8, 9}) {
      for (std::size_t cls = 3; cls <= 28; ++cls) {
        const std::size_t low = std::size_t{1} << (cls - 1);
        const Call first = shaped(kind, low, world);
        const std::string_view want = reg().default_choice(first, world).name();
        for (std::size_t bytes : {low + 4, low + low / 2, 2 * low - 4}) {
          const Call c = shaped(kind, bytes, world);
          if (size_class(c) != size_class(first)) continue;  // rounded to other block sizes
          EXPECT_EQ(reg().default_choice(c, world).name(), want)
              << to_string(kind) << " of " << bytes << " bytes on " << world << " ranks";
        }
      }
    }
  }
  EXPECT_EQ(size_class(shaped(CollectiveKind::allreduce, 0, 2)), 0u);
  EXPECT_EQ(size_class(shaped(CollectiveKind::allreduce, 4, 2)), 3u);
  EXPECT_EQ(size_class(shaped(CollectiveKind::allreduce, 16 * 1024 - 4, 2)), 14u);
  EXPECT_EQ(size_class(shaped(CollectiveKind::allreduce, 16 * 1024, 2)), 15u);
}

HostLayout layout(std::vector<int> host_of) {
  HostLayout l;
  l.host_of = std::move(host_of);
  l.hosts = 1 + *std::max_element(l.host_of.begin(), l.host_of.end());
  std::vector<int> per(static_cast<std::size_t>(l.hosts));
  for (int h : l.host_of) ++per[static_cast<std::size_t>(h)];
  l.ranks_per_host =
      std::all_of(per.begin(), per.end(), [&](int c) { return c == per[0]; }) ? per[0] : 0;
  return l;
}

TEST(DefaultChoice, HierarchicalAllreduceAcrossHostsWithSeveralRanksEach) {
  const auto call = [](const HostLayout& l, std::size_t bytes) {
    Call c = shaped(CollectiveKind::allreduce, bytes, static_cast<int>(l.host_of.size()));
    c.hosts = &l;
    return c;
  };
  const auto with = [&](const HostLayout& l, std::size_t bytes) {
    return reg().default_choice(call(l, bytes), static_cast<int>(l.host_of.size())).name();
  };
  const Algorithm* hierarchical = reg().find(CollectiveKind::allreduce, "hierarchical");
  ASSERT_NE(hierarchical, nullptr);
  const HostLayout two_by_two = layout({0, 0, 1, 1});
  const HostLayout interleaved = layout({0, 1, 2, 0, 1, 2});
  const HostLayout one_each = layout({0, 1});
  const HostLayout uneven = layout({0, 0, 1});
  const HostLayout one_host = layout({0, 0, 0, 0});
  EXPECT_EQ(with(two_by_two, 1 << 20), "hierarchical");
  EXPECT_EQ(with(interleaved, 64 << 20), "hierarchical");
  EXPECT_EQ(with(two_by_two, 16 << 10), "hierarchical");
  // Small messages are latency-bound: the flat log-step algorithm.
  EXPECT_EQ(with(two_by_two, 8), "recursive_doubling");
  // Nothing to keep inside a host, or hosts of different sizes: the flat ring. One host: the
  // one-host choice (ring, and from 1 MiB direct, which is one-copy on registered buffers).
  EXPECT_EQ(with(one_each, 1 << 20), "ring");
  EXPECT_EQ(with(uneven, 1 << 20), "ring");
  EXPECT_EQ(with(one_host, 256 << 10), "ring");
  EXPECT_EQ(with(one_host, 1 << 20), "direct");
  // What a forced choice asks (comm::AlgoPolicy falls back where the answer is no).
  EXPECT_FALSE(hierarchical->supports(call(uneven, 1 << 20), 3));
  EXPECT_FALSE(hierarchical->supports(call(one_each, 1 << 20), 2));
  EXPECT_FALSE(hierarchical->supports(call(one_host, 1 << 20), 4));
  EXPECT_TRUE(hierarchical->supports(call(two_by_two, 8), 4));
  EXPECT_EQ(pick(CollectiveKind::allreduce, 1 << 20, 4), "direct");  // no layout: one host
}

TEST(DefaultChoice, AllgathervNeedsCountsPerRank) {
  Call c = shaped(CollectiveKind::allgatherv, 64, 3);
  const std::size_t counts[] = {1, 2, 3};
  c.counts = counts;
  EXPECT_EQ(reg().default_choice(c, 3).name(), "ring");
  EXPECT_EQ(code_of([&] { reg().default_choice(c, 4); }), ErrorCode::InvalidArgument);
}

TEST(Fingerprint, EveryFieldCounts) {
  const auto base = fingerprint(CollectiveKind::allreduce, DataType::f32, 1000, 0, 7);
  EXPECT_EQ(base, fingerprint(CollectiveKind::allreduce, DataType::f32, 1000, 0, 7));
  EXPECT_NE(base, fingerprint(CollectiveKind::broadcast, DataType::f32, 1000, 0, 7));
  EXPECT_NE(base, fingerprint(CollectiveKind::allreduce, DataType::i32, 1000, 0, 7));
  EXPECT_NE(base, fingerprint(CollectiveKind::allreduce, DataType::f32, 1001, 0, 7));
  EXPECT_NE(base, fingerprint(CollectiveKind::allreduce, DataType::f32, 1000, 1, 7));
  EXPECT_NE(base, fingerprint(CollectiveKind::allreduce, DataType::f32, 1000, 0, 8));
  // Consecutive sequence numbers and counts all differ (no trivial collisions).
  std::set<std::uint32_t> seen;
  for (std::uint64_t seq = 0; seq < 10000; ++seq)
    seen.insert(fingerprint(CollectiveKind::allreduce, DataType::f32, 1000, 0, seq));
  for (std::size_t count = 0; count < 10000; ++count)
    seen.insert(fingerprint(CollectiveKind::allreduce, DataType::f32, count, 0, 12345678));
  EXPECT_GT(seen.size(), 19990u);
}

TEST(Fingerprint, SendMatchesRecv) {
  // The two sides name each other as the peer; the tag must still agree.
  EXPECT_EQ(fingerprint(CollectiveKind::send, DataType::u8, 64, 1, 42),
            fingerprint(CollectiveKind::recv, DataType::u8, 64, 0, 42));
  EXPECT_NE(fingerprint(CollectiveKind::send, DataType::u8, 64, 1, 42),
            fingerprint(CollectiveKind::send, DataType::u8, 64, 1, 43));
  EXPECT_NE(fingerprint(CollectiveKind::send, DataType::u8, 64, 1, 42),
            fingerprint(CollectiveKind::send, DataType::u8, 65, 1, 42));
}

// Page-aligned, kept while big enough (never shrinks), grown at least twofold, and a reserve()
// makes the next get() of that size return the reserved memory (no mapping in a collective).
TEST(Scratch, AlignedReusedAndReserved) {
  Scratch s;
  std::byte* a = s.get(100);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 4096, 0u);
  a[99] = std::byte{1};
  EXPECT_EQ(s.get(50), a);
  EXPECT_EQ(s.get(4096), a) << "a get() that fits must not map again";
  s.reserve(1 << 20);
  std::byte* b = s.get(1 << 20);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b) % 4096, 0u);
  b[(1 << 20) - 1] = std::byte{2};  // writable to its end
  EXPECT_EQ(s.get(1000), b);
  EXPECT_NE(s.get(0), nullptr);
  std::byte* c = s.get((1 << 20) + 1);
  EXPECT_NE(c, b);
  EXPECT_EQ(s.get(2 << 20), c) << "growth must be at least twofold";
}

}  // namespace
}  // namespace tandem::algorithms
