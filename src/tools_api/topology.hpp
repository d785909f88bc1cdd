#pragma once
// The tools' internal API (docs/architecture.md, "The tools' internal API"): the host's
// topology (NUMA nodes, cores, caches, GPUs and NICs, the paths between them) and the CPU sets
// local ranks are bound to. These are the topo layer's own types and functions, which depend
// on nothing but the public headers; the tools name them through this header.

#include "topo/binding.hpp"
#include "topo/topology.hpp"

#include <string>
#include <vector>

namespace tandem::tools_api {

using topo::bind_local_ranks;
using topo::Binding;
using topo::Cache;
using topo::Core;
using topo::CpuBind;
using topo::CpuList;
using topo::discover;
using topo::from_xml;
using topo::NumaNode;
using topo::parse_cpu_bind;
using topo::path_type;
using topo::save_xml;
using topo::to_string;
using topo::Topology;
using TopoDevice = topo::Device;

/// The path matrix of `nvidia-smi topo -m`: paths[a][b] is how device a reaches device b
/// (path_type(...).str(): X, NV<links>, PIX, PXB, PHB, NODE or SYS), the devices numbered
/// GPUs first, then NICs.
std::vector<std::vector<std::string>> path_matrix(const Topology& t);

}  // namespace tandem::tools_api
