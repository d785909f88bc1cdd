#pragma once
// tandem-topo's output: the device matrix in the style of `nvidia-smi topo -m`, the local
// ranks (transport between each pair, CPU set of each), and what --measure found; as text or
// as one JSON document.

#include "tools_api/topology.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace tandem::tools::topo_tool {

struct RankPlan {
  int nproc = 0;
  tools_api::CpuBind policy = tools_api::CpuBind::core;
  tools_api::Binding binding;
  bool shm = true;  ///< false: TANDEM_SHM_DISABLE=1, ranks talk over loopback TCP
  /// The transport between local ranks a and b ("X" for a == b).
  std::string transport(int a, int b) const;
};

struct Measurements {
  bool done = false;
  std::size_t bytes = 0;
  std::vector<std::vector<double>> pair_gbps;     ///< [from rank][to rank]
  std::vector<std::pair<int, double>> node_gbps;  ///< (NUMA node, GB/s)
};

std::string text_report(const tools_api::Topology& t, const RankPlan& plan, const Measurements& m);
nlohmann::json json_report(const tools_api::Topology& t, const RankPlan& plan,
                           const Measurements& m);

}  // namespace tandem::tools::topo_tool
