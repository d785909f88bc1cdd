#pragma once
// The α–β–γ cost model behind the selector's choice between a ring (2(n-1) steps) and the
// log-step algorithms (log2 n steps) at larger worlds: α is the cost of one message step, β
// of a byte moved, γ of a byte reduced where the reduction cannot overlap a transfer. The
// constants are measured on a 2-vCPU host (docs/scale.md has the method and the checks).

#include <cstddef>

namespace tandem::algorithms::model {

/// Costs of one link kind, in nanoseconds.
struct LinkCost {
  double alpha;  ///< per message step (an 8 B exchange)
  double beta;   ///< per byte moved
  double gamma;  ///< per byte reduced
};

/// Shared memory between ranks of one host: an 8 B exchange 0.3 µs, 14 GB/s, reductions 10 GB/s.
inline constexpr LinkCost kShm{300.0, 0.07, 0.1};
/// TCP between hosts (loopback here): an 8 B exchange 8.6 µs, 3 GB/s, reductions 10 GB/s.
inline constexpr LinkCost kTcp{8600.0, 0.31, 0.1};

/// Ring allreduce of `bytes` on `n` ranks: reduce-scatter then allgather, 2(n-1) steps of
/// bytes/n; its chunks overlap the reduction with the transfer.
double ring_allreduce(int n, double bytes, const LinkCost& c) noexcept;
/// Rabenseifner's allreduce: recursive halving then doubling over the largest power of two
/// p <= n (2 log2 p steps), each half reduced after it arrived; with n != p the extra ranks
/// fold into partners first and get the result back (2 more steps of the whole message).
double rabenseifner_allreduce(int n, double bytes, const LinkCost& c) noexcept;
/// A binomial tree reduce to one rank, then a binomial tree broadcast: 2 ceil(log2 n) steps
/// of the whole message (one chunk: what a small block between hosts sends).
double tree_allreduce(int n, double bytes, const LinkCost& c) noexcept;

/// The selector's question for an allreduce of `bytes` on `n` ranks: whether Rabenseifner is
/// expected to beat the ring. Decided at the power of two at or below `bytes`, so that every
/// size of a size class gets the same answer (choices are cached per class).
bool prefer_log_steps(int n, std::size_t bytes, const LinkCost& c) noexcept;
/// Hierarchical allreduce between `hosts` hosts, each moving a block of `bytes`: whether a
/// tree between hosts is expected to beat the ring.
bool prefer_tree_between_hosts(int hosts, std::size_t bytes, const LinkCost& c) noexcept;

}  // namespace tandem::algorithms::model
