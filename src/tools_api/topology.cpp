#include "tools_api/topology.hpp"

#include "topo/binding.hpp"
#include "topo/topology.hpp"

#include <tandem/error.hpp>

namespace tandem::tools_api {
namespace {

TopoDevice device_of(const topo::Device& d) {
  return {d.name, d.busid, d.numa, d.cpus, d.bridges.size()};
}

// The plain view of `t`, which it keeps for bind_local_ranks().
Topology view_of(topo::Topology t) {
  auto detail = std::make_shared<const topo::Topology>(std::move(t));
  const topo::Topology& d = *detail;
  Topology v;
  v.source = d.source;
  v.hostname = d.hostname;
  v.nvml = d.nvml;
  v.gpus_without_driver = d.gpus_without_driver;
  v.pci_devices = d.pci.size();
  v.cpus = d.all_cpus();
  for (const topo::NumaNode& n : d.numa_nodes)
    v.numa_nodes.push_back({n.os_index, n.memory, n.cpus});
  for (const topo::Core& c : d.cores) v.cores.push_back({c.os_index, c.numa, c.pus});
  for (const topo::Cache& c : d.caches) v.caches.push_back({c.level, c.size, c.cpus});
  std::vector<const topo::Device*> devices;
  for (const topo::Device& g : d.gpus) {
    v.gpus.push_back(device_of(g));
    devices.push_back(&g);
  }
  for (const topo::Device& n : d.nics) {
    v.nics.push_back(device_of(n));
    devices.push_back(&n);
  }
  for (const topo::Device* a : devices) {
    std::vector<std::string>& row = v.paths.emplace_back();
    for (const topo::Device* b : devices) row.push_back(topo::path_type(d, *a, *b).str());
  }
  v.detail = std::move(detail);
  return v;
}

topo::CpuBind layer_policy(CpuBind b) noexcept {
  switch (b) {
    case CpuBind::core:
      return topo::CpuBind::core;
    case CpuBind::numa:
      return topo::CpuBind::numa;
    case CpuBind::none:
      break;
  }
  return topo::CpuBind::none;
}

}  // namespace

std::vector<const NumaNode*> Topology::cpu_nodes() const {
  std::vector<const NumaNode*> out;
  for (const NumaNode& n : numa_nodes)
    if (!n.cpus.empty()) out.push_back(&n);
  return out;
}

Topology discover() {
  return view_of(topo::discover());
}

Topology from_xml(const std::string& path) {
  return view_of(topo::from_xml(path));
}

void save_xml(const std::string& path) {
  topo::save_xml(path);
}

std::string to_string(const CpuList& cpus) {
  return topo::to_string(cpus);
}

std::string_view to_string(CpuBind b) noexcept {
  return topo::to_string(layer_policy(b));
}

std::optional<CpuBind> parse_cpu_bind(std::string_view text) noexcept {
  const std::optional<topo::CpuBind> parsed = topo::parse_cpu_bind(text);
  for (CpuBind b : {CpuBind::none, CpuBind::core, CpuBind::numa})
    if (parsed == layer_policy(b)) return b;
  return std::nullopt;
}

Binding bind_local_ranks(const Topology& t, CpuBind policy, int nranks) {
  TANDEM_CHECK(t.detail != nullptr, "a topology not made by discover() or from_xml()");
  topo::Binding b = topo::bind_local_ranks(*t.detail, layer_policy(policy), nranks);
  return {std::move(b.cpus), std::move(b.numa), std::move(b.warning)};
}

}  // namespace tandem::tools_api
