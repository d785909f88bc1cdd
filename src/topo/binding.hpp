#pragma once
// Which CPUs each local rank runs on (tandemrun --cpu-bind, tandem-topo).

#include "topo/topology.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::topo {

enum class CpuBind {
  none,  ///< no binding: every rank may run anywhere
  core,  ///< disjoint sets of whole cores, ranks spread over NUMA nodes in blocks
  numa,  ///< all CPUs of one NUMA node, nodes dealt round robin
};

std::string_view to_string(CpuBind b) noexcept;
/// "core", "numa" or "none"; nullopt for anything else.
std::optional<CpuBind> parse_cpu_bind(std::string_view text) noexcept;

struct Binding {
  std::vector<CpuList> cpus;  ///< per local rank (with none: every CPU)
  std::vector<int> numa;      ///< per local rank: its NUMA node, -1 when it spans several
  /// Non-empty when the policy could not be met (more ranks than cores): what was done.
  std::string warning;
};

/// The CPU sets of `nranks` local ranks under `policy`.
///
/// core: NUMA nodes get ranks in proportion to their cores (rank 0.. on the first node, so
/// that neighbouring ranks share a node), and each node's cores are split into equal
/// contiguous groups, one per rank (sizes differ by at most one core). With more ranks than
/// cores, rank r gets core r mod cores, and `warning` says that ranks share cores.
/// numa: rank r gets every CPU of the r-th NUMA node with CPUs, modulo their number.
/// Throws Error(InvalidArgument) when nranks < 1 or the topology has no CPUs.
Binding bind_local_ranks(const Topology& t, CpuBind policy, int nranks);

}  // namespace tandem::topo
