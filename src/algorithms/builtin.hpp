#pragma once
// The built-in algorithms, one per file under src/algorithms/<collective>/<name>.cpp, each
// defining detail::make_<collective>_<name>(). Adding one is that file plus one line here:
// the registry registers every entry in this order (the order `Registry::of` reports and
// the fallback when no preferred algorithm supports a call).

#include "algorithms/algorithm.hpp"

#include <memory>

// X(collective, name) for every built-in algorithm.
#define TANDEM_BUILTIN_ALGORITHMS(X)   \
  X(allreduce, ring)                   \
  X(allreduce, recursive_doubling)     \
  X(allreduce, tree)                   \
  X(allreduce, rabenseifner)           \
  X(allreduce, hierarchical)           \
  X(allreduce, direct)                 \
  X(broadcast, tree)                   \
  X(broadcast, ring)                   \
  X(broadcast, direct)                 \
  X(reduce, tree)                      \
  X(reduce, ring)                      \
  X(allgather, ring)                   \
  X(allgather, recursive_doubling)     \
  X(allgather, bruck)                  \
  X(allgather, direct)                 \
  X(allgatherv, ring)                  \
  X(reduce_scatter, ring)              \
  X(reduce_scatter, recursive_halving) \
  X(reduce_scatter, direct)            \
  X(alltoall, pairwise)                \
  X(gather, linear)                    \
  X(gather, binomial)                  \
  X(scatter, linear)                   \
  X(scatter, binomial)                 \
  X(barrier, dissemination)            \
  X(send, direct)                      \
  X(recv, direct)

namespace tandem::algorithms::detail {

#define TANDEM_DECLARE_ALGORITHM_FACTORY(collective, name) \
  std::unique_ptr<Algorithm> make_##collective##_##name();
TANDEM_BUILTIN_ALGORITHMS(TANDEM_DECLARE_ALGORITHM_FACTORY)
#undef TANDEM_DECLARE_ALGORITHM_FACTORY

}  // namespace tandem::algorithms::detail
