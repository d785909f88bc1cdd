#include "report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace tandem::tools::topo_tool {
namespace {

using tools_api::TopoDevice;

// The devices of the matrix, GPUs first, then NICs: the order of tools_api::path_matrix().
struct Column {
  std::string label;
  const TopoDevice* device;
  bool gpu;
};

std::vector<Column> columns(const tools_api::Topology& t) {
  std::vector<Column> out;
  for (std::size_t i = 0; i < t.gpus.size(); ++i)
    out.push_back({fmt::format("GPU{}", i), &t.gpus[i], true});
  for (std::size_t i = 0; i < t.nics.size(); ++i)
    out.push_back({fmt::format("NIC{}", i), &t.nics[i], false});
  return out;
}

std::string numa_text(int numa) {
  return numa < 0 ? "N/A" : std::to_string(numa);
}

std::string bytes_text(std::uint64_t b) {
  if (b >= (std::uint64_t{1} << 30) && b % (std::uint64_t{1} << 30) == 0)
    return fmt::format("{} GiB", b >> 30);
  if (b >= (std::uint64_t{1} << 30))
    return fmt::format("{:.1f} GiB", static_cast<double>(b) / (1 << 30));
  if (b >= (std::uint64_t{1} << 20)) return fmt::format("{} MiB", b >> 20);
  return fmt::format("{} KiB", b >> 10);
}

std::string summary(const tools_api::Topology& t) {
  std::string s = fmt::format("Topology of {} ({}): {} NUMA node(s), {} core(s), {} CPU(s)\n",
                              t.hostname.empty() ? "?" : t.hostname, t.source, t.numa_nodes.size(),
                              t.cores.size(), t.all_cpus().size());
  for (const tools_api::NumaNode& n : t.numa_nodes)
    s += fmt::format("  NUMA node {}: CPUs {}, {} memory\n", n.os_index,
                     n.cpus.empty() ? "none" : tools_api::to_string(n.cpus), bytes_text(n.memory));
  std::map<std::pair<int, std::uint64_t>, int> caches;  // (level, size) -> count
  for (const tools_api::Cache& c : t.caches) ++caches[{c.level, c.size}];
  if (!caches.empty()) {
    s += "  caches:";
    for (const auto& [key, n] : caches)
      s += fmt::format(" L{} {} x{},", key.first, bytes_text(key.second), n);
    s.back() = '\n';
  }
  const std::string gpus =
      t.nvml ? "NVML"
      : t.source != "this machine"
          ? "NVIDIA PCI devices of the file"
          : fmt::format(
                "no NVML: libnvidia-ml.so.1 absent or without a driver{}",
                t.gpus_without_driver > 0
                    ? fmt::format("; {} NVIDIA device(s) on PCI left out", t.gpus_without_driver)
                    : "");
  s += fmt::format("  PCI devices: {}; GPUs: {} ({}); NICs: {}\n", t.pci.size(), t.gpus.size(),
                   gpus, t.nics.size());
  return s;
}

std::string pad(const std::string& s, std::size_t w) {
  return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' ');
}

std::string device_matrix(const tools_api::Topology& t) {
  const auto cols = columns(t);
  if (cols.empty()) return "No GPUs or NICs on PCI: no device matrix.\n";
  std::size_t aff = 12;
  for (const auto& c : cols) aff = std::max(aff, tools_api::to_string(c.device->cpus).size());
  std::string s = pad("", 8);
  for (const auto& c : cols) s += pad(c.label, 8);
  s += pad("CPU Affinity", aff + 4) + "NUMA Affinity\n";
  const auto paths = tools_api::path_matrix(t);
  for (std::size_t a = 0; a < cols.size(); ++a) {
    s += pad(cols[a].label, 8);
    for (const std::string& path : paths[a]) s += pad(" " + path, 8);
    s += pad(tools_api::to_string(cols[a].device->cpus), aff + 4) +
         numa_text(cols[a].device->numa) + "\n";
  }
  s += "\nLegend:\n\n"
       "  X    = Self\n"
       "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes "
       "(e.g., QPI/UPI)\n"
       "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host "
       "Bridges within a NUMA node\n"
       "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
       "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host "
       "Bridge)\n"
       "  PIX  = Connection traversing at most a single PCIe bridge\n"
       "  NV#  = Connection traversing a bonded set of # NVLinks\n";
  if (!t.gpus.empty()) {
    s += "\nGPU Legend:\n\n";
    for (std::size_t i = 0; i < t.gpus.size(); ++i)
      s += fmt::format("  GPU{}: {} ({})\n", i, t.gpus[i].name, t.gpus[i].busid);
  }
  if (!t.nics.empty()) {
    s += "\nNIC Legend:\n\n";
    for (std::size_t i = 0; i < t.nics.size(); ++i)
      s += fmt::format("  NIC{}: {} ({})\n", i, t.nics[i].name, t.nics[i].busid);
  }
  return s;
}

std::string rank_gpu(const tools_api::Topology& t, int r) {
  return static_cast<std::size_t>(r) < t.gpus.size() ? fmt::format("GPU{}", r) : "-";
}

std::string rank_matrix(const tools_api::Topology& t, const RankPlan& p) {
  std::string s = fmt::format("\nLocal ranks (--nproc-per-node {}, --cpu-bind {}):\n\n", p.nproc,
                              tools_api::to_string(p.policy));
  std::size_t w = 8;
  for (const auto& c : p.binding.cpus) w = std::max(w, tools_api::to_string(c).size());
  s += pad("", 8);
  for (int b = 0; b < p.nproc; ++b) s += pad(fmt::format("rank{}", b), 8);
  s += pad("CPU set", w + 4) + pad("NUMA", 6) + "GPU\n";
  for (int a = 0; a < p.nproc; ++a) {
    s += pad(fmt::format("rank{}", a), 8);
    for (int b = 0; b < p.nproc; ++b) s += pad(" " + p.transport(a, b), 8);
    const auto ua = static_cast<std::size_t>(a);
    s += pad(tools_api::to_string(p.binding.cpus[ua]), w + 4) +
         pad(numa_text(p.binding.numa[ua]), 6) + rank_gpu(t, a) + "\n";
  }
  s += "\n  shm  = shared memory between ranks of one host\n"
       "  tcp  = TCP over loopback (TANDEM_SHM_DISABLE=1)\n";
  if (!t.gpus.empty())
    s += "  Ranks exchange host memory; between GPU buffers a CUDA IPC or NCCL transport would "
         "take the GPU paths of the matrix above.\n";
  if (!p.binding.warning.empty()) s += "  warning: " + p.binding.warning + "\n";
  return s;
}

std::string measured(const RankPlan& p, const Measurements& m) {
  if (!m.done) return {};
  std::string s = fmt::format(
      "\nMeasured (--measure, {} MiB per pass; a loaded machine gives noisy numbers):\n\n"
      "  GB/s from rank (row) to rank (column) through a shared 4 x 1 MiB ring, one thread on\n"
      "  each rank's CPU set (diagonal: memcpy within one rank's CPU set; beyond 8 ranks only\n"
      "  pairs with rank 0, '-' elsewhere):\n\n",
      m.bytes >> 20);
  s += "  " + pad("", 8);
  for (int b = 0; b < p.nproc; ++b) s += pad(fmt::format("rank{}", b), 8);
  s += "\n";
  for (int a = 0; a < p.nproc; ++a) {
    s += "  " + pad(fmt::format("rank{}", a), 8);
    for (int b = 0; b < p.nproc; ++b) {
      const double v = m.pair_gbps[static_cast<std::size_t>(a)][static_cast<std::size_t>(b)];
      s += pad(std::isnan(v) ? "-" : fmt::format("{:.1f}", v), 8);
    }
    s += "\n";
  }
  s +=
      "\n  Memory bandwidth per NUMA node (copy by one thread per core; bytes read + written):\n\n";
  for (const auto& [node, gbps] : m.node_gbps)
    s += fmt::format("  node {}: {:.1f} GB/s\n", node, gbps);
  return s;
}

nlohmann::json device_json(const tools_api::Topology& t, const Column& c) {
  const TopoDevice& d = *c.device;
  return {{"name", d.name},
          {"busid", d.busid},
          {"numa", d.numa},
          {"cpus", tools_api::to_string(d.cpus)},
          {"bridges", d.bridges.size()},
          {"kind", c.gpu ? "gpu" : "nic"},
          {"nvml", c.gpu && t.nvml}};
}

}  // namespace

std::string RankPlan::transport(int a, int b) const {
  if (a == b) return "X";
  return shm ? "shm" : "tcp";
}

std::string text_report(const tools_api::Topology& t, const RankPlan& plan, const Measurements& m) {
  const std::string padded =
      summary(t) + "\n" + device_matrix(t) + rank_matrix(t, plan) + measured(plan, m);
  std::string out;  // without the padding at the ends of lines
  for (char c : padded) {
    if (c == '\n')
      while (!out.empty() && out.back() == ' ') out.pop_back();
    out += c;
  }
  return out;
}

nlohmann::json json_report(const tools_api::Topology& t, const RankPlan& p, const Measurements& m) {
  nlohmann::json j;
  j["hostname"] = t.hostname;
  j["source"] = t.source;
  j["nvml"] = t.nvml;
  j["cpus"] = tools_api::to_string(t.all_cpus());
  for (const auto& n : t.numa_nodes)
    j["numa_nodes"].push_back(
        {{"os_index", n.os_index}, {"memory", n.memory}, {"cpus", tools_api::to_string(n.cpus)}});
  for (const auto& c : t.cores)
    j["cores"].push_back(
        {{"os_index", c.os_index}, {"numa", c.numa}, {"pus", tools_api::to_string(c.pus)}});
  for (const auto& c : t.caches)
    j["caches"].push_back(
        {{"level", c.level}, {"size", c.size}, {"cpus", tools_api::to_string(c.cpus)}});
  const auto cols = columns(t);
  const auto paths = tools_api::path_matrix(t);
  j["devices"] = nlohmann::json::array();
  j["paths"] = nlohmann::json::array();
  for (std::size_t a = 0; a < cols.size(); ++a) {
    nlohmann::json d = device_json(t, cols[a]);
    d["label"] = cols[a].label;
    j["devices"].push_back(d);
    j["paths"].push_back(paths[a]);
  }
  nlohmann::json ranks;
  ranks["nproc_per_node"] = p.nproc;
  ranks["cpu_bind"] = std::string(tools_api::to_string(p.policy));
  for (int a = 0; a < p.nproc; ++a) {
    const auto ua = static_cast<std::size_t>(a);
    nlohmann::json row = nlohmann::json::array();
    for (int b = 0; b < p.nproc; ++b) row.push_back(p.transport(a, b));
    ranks["transport"].push_back(row);
    ranks["cpus"].push_back(tools_api::to_string(p.binding.cpus[ua]));
    ranks["numa"].push_back(p.binding.numa[ua]);
  }
  if (!p.binding.warning.empty()) ranks["warning"] = p.binding.warning;
  j["local_ranks"] = ranks;
  if (m.done) {
    j["measured"]["bytes"] = m.bytes;
    j["measured"]["pair_gbps"] = m.pair_gbps;
    for (const auto& [node, gbps] : m.node_gbps)
      j["measured"]["numa_gbps"].push_back({{"node", node}, {"gbps", gbps}});
  }
  return j;
}

}  // namespace tandem::tools::topo_tool
