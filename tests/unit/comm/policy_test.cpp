// The one place that chooses an algorithm: TANDEM_ALGO / CommOptions::algorithm parsing, the
// forced choice (lenient: falls back where it does not apply), the per-call choice (strict)
// and their error messages. The default by size is tested with the registry, the tuning file
// with its parser (tuning_test.cpp).

#include "comm/choice/policy.hpp"

#include <tandem/error.hpp>

#include <gtest/gtest.h>

#include <functional>
#include <string>

namespace tandem::comm {
namespace {

const algorithms::Registry& reg() {
  return algorithms::Registry::builtin();
}

std::string_view pick(const AlgoPolicy& policy, CollectiveKind kind, std::size_t bytes, int world,
                      std::string_view per_call = {}) {
  return policy.choose(reg(), probe_call(kind, bytes, world), world, per_call).name();
}

std::string_view forced(std::string_view spec, CollectiveKind kind, std::size_t bytes, int world) {
  return pick(AlgoPolicy(spec, "TANDEM_ALGO", reg()), kind, bytes, world);
}

/// The InvalidArgument message `f` throws ("" and a failure when it throws nothing else).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    return e.message();
  }
  ADD_FAILURE() << "no error";
  return {};
}

bool has(const std::string& s, std::string_view what) {
  return s.find(what) != std::string::npos;
}

TEST(AlgoPolicy, NoneGivesTheDefault) {
  const AlgoPolicy none;
  for (auto kind : {CollectiveKind::allreduce, CollectiveKind::broadcast, CollectiveKind::reduce,
                    CollectiveKind::allgather, CollectiveKind::reduce_scatter})
    for (std::size_t bytes : {8u, 64u << 10, 4u << 20})
      for (int world : {2, 3, 4}) {
        const auto call = probe_call(kind, bytes, world);
        EXPECT_EQ(none.choose(reg(), call, world, {}).name(),
                  reg().default_choice(call, world).name())
            << to_string(kind) << " " << bytes << " on " << world;
      }
  EXPECT_EQ(AlgoPolicy("  ", "TANDEM_ALGO", reg()).spec(), "");
}

TEST(AlgoPolicy, ForcedForEveryCollectiveThatHasIt) {
  EXPECT_EQ(forced("ring", CollectiveKind::allreduce, 8, 4), "ring");
  EXPECT_EQ(forced("Tree", CollectiveKind::allreduce, 8, 4), "tree");
  EXPECT_EQ(forced("rabenseifner", CollectiveKind::allreduce, 1 << 20, 4), "rabenseifner");
  EXPECT_EQ(forced("ring", CollectiveKind::broadcast, 8, 4), "ring");
  // Collectives without a ring keep their default.
  EXPECT_EQ(forced("ring", CollectiveKind::barrier, 0, 4), "dissemination");
  EXPECT_EQ(forced("ring", CollectiveKind::alltoall, 64, 4), "pairwise");
}

TEST(AlgoPolicy, ForcedPerCollective) {
  const std::string_view spec = "allreduce=tree, broadcast=ring";
  EXPECT_EQ(forced(spec, CollectiveKind::allreduce, 1 << 20, 4), "tree");
  EXPECT_EQ(forced(spec, CollectiveKind::broadcast, 8, 4), "ring");
  EXPECT_EQ(forced(spec, CollectiveKind::reduce, 8, 4), "tree");  // its defaults
  EXPECT_EQ(forced(spec, CollectiveKind::reduce, 1 << 20, 4), "ring");
  const AlgoPolicy p(spec, "TANDEM_ALGO", reg());
  EXPECT_EQ(p.forced(CollectiveKind::allreduce), "tree");
  EXPECT_EQ(p.forced(CollectiveKind::reduce), "");
  EXPECT_EQ(p.spec(), spec);
}

TEST(AlgoPolicy, ForcedFallsBackWhereItDoesNotApply) {
  // recursive_doubling needs a power-of-two world; hierarchical, several hosts.
  EXPECT_EQ(forced("recursive_doubling", CollectiveKind::allgather, 8 * 1024, 3), "bruck");
  EXPECT_EQ(forced("recursive_doubling", CollectiveKind::allgather, 8 * 1024, 4),
            "recursive_doubling");
  EXPECT_EQ(forced("hierarchical", CollectiveKind::allreduce, 1 << 20, 4), "direct");
  EXPECT_EQ(forced("recursive_halving", CollectiveKind::reduce_scatter, 1024, 6), "ring");
  // A name known for another collective only falls back too.
  EXPECT_EQ(forced("allreduce=bruck", CollectiveKind::allreduce, 8, 4), "recursive_doubling");
}

TEST(AlgoPolicy, PerCallIsStrict) {
  const AlgoPolicy none;
  const AlgoPolicy tree("tree", "TANDEM_ALGO", reg());
  // A per-call name wins over the forced one.
  EXPECT_EQ(pick(tree, CollectiveKind::allreduce, 8, 4, "ring"), "ring");
  EXPECT_EQ(pick(none, CollectiveKind::allreduce, 8, 4, "RING"), "ring");
  std::string m =
      error_of([&] { pick(none, CollectiveKind::allgather, 8 * 1024, 3, "recursive_doubling"); });
  EXPECT_TRUE(has(m, "does not support")) << m;
  EXPECT_TRUE(has(m, "CallOptions::algorithm")) << m;
  m = error_of([&] { pick(none, CollectiveKind::barrier, 0, 4, "ring"); });
  EXPECT_TRUE(has(m, "no algorithm named 'ring'")) << m;
  EXPECT_TRUE(has(m, "dissemination")) << m;
  // Remembering the last name per collective must not return it for another name.
  EXPECT_EQ(pick(none, CollectiveKind::allreduce, 8, 4, "tree"), "tree");
  EXPECT_EQ(pick(none, CollectiveKind::allreduce, 8, 4, "rabenseifner"), "rabenseifner");
  EXPECT_EQ(pick(none, CollectiveKind::allreduce, 8, 4), "recursive_doubling");
}

TEST(AlgoPolicy, UnknownNamesAreErrorsAtConstruction) {
  std::string m = error_of([] { AlgoPolicy("rnig", "TANDEM_ALGO", reg()); });
  EXPECT_TRUE(has(m, "TANDEM_ALGO='rnig'")) << m;
  EXPECT_TRUE(has(m, "'rnig'")) << m;
  for (const char* known : {"ring", "recursive_doubling", "tree", "rabenseifner", "pairwise"})
    EXPECT_TRUE(has(m, known)) << m;
  m = error_of([] { AlgoPolicy("broadcast=bogus", "CommOptions::algorithm", reg()); });
  EXPECT_TRUE(has(m, "CommOptions::algorithm='broadcast=bogus'")) << m;
  EXPECT_TRUE(has(m, "'bogus'")) << m;
  m = error_of([] { AlgoPolicy("allreduse=ring", "TANDEM_ALGO", reg()); });
  EXPECT_TRUE(has(m, "allreduse=ring")) << m;
  EXPECT_TRUE(has(m, "COLLECTIVE=NAME")) << m;
}

TEST(AlgoPolicy, CopiesKeepTheForcedChoice) {
  const AlgoPolicy p("allreduce=tree", "TANDEM_ALGO", reg());
  const AlgoPolicy copy(p);
  AlgoPolicy assigned;
  assigned = p;
  for (const AlgoPolicy* q : {&copy, static_cast<const AlgoPolicy*>(&assigned)}) {
    EXPECT_EQ(q->spec(), "allreduce=tree");
    EXPECT_EQ(pick(*q, CollectiveKind::allreduce, 1 << 20, 4), "tree");
  }
}

TEST(ForcedAlgorithm, Parses) {
  EXPECT_EQ(forced_algorithm("", CollectiveKind::allreduce), "");
  EXPECT_EQ(forced_algorithm("ring", CollectiveKind::allreduce), "ring");
  EXPECT_EQ(forced_algorithm("ring", CollectiveKind::barrier), "ring");
  EXPECT_EQ(forced_algorithm(" allreduce = ring ; broadcast=tree ", CollectiveKind::broadcast),
            "tree");
  EXPECT_EQ(forced_algorithm("allreduce=ring,broadcast=tree", CollectiveKind::allreduce), "ring");
  EXPECT_EQ(forced_algorithm("allreduce=ring,broadcast=tree", CollectiveKind::reduce), "");
  EXPECT_EQ(forced_algorithm("tree,allreduce=ring", CollectiveKind::allreduce), "ring");
  EXPECT_EQ(forced_algorithm("allreduce=ring,tree", CollectiveKind::allreduce), "ring");
  EXPECT_EQ(forced_algorithm("allreduce=ring,tree", CollectiveKind::broadcast), "tree");
  EXPECT_EQ(forced_algorithm("ALLREDUCE=ring", CollectiveKind::allreduce), "ring");
  EXPECT_EQ(forced_algorithm("reduce_scatter=recursive_halving", CollectiveKind::reduce_scatter),
            "recursive_halving");
  EXPECT_EQ(forced_algorithm(",,ring,", CollectiveKind::allgather), "ring");
  EXPECT_EQ(forced_algorithm("\tallreduce=ring\n", CollectiveKind::allreduce), "ring");
  for (const char* bad : {"allreduce=", "=ring", "allreduse=ring", "allreduce=ring,foo=tree"})
    EXPECT_FALSE(error_of([&] { forced_algorithm(bad, CollectiveKind::allreduce); }).empty())
        << bad;
}

}  // namespace
}  // namespace tandem::comm
