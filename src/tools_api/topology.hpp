#pragma once
// The tools' internal API (docs/architecture.md, "The tools' internal API"): the host's
// topology as plain data for display, and the CPU sets local ranks are bound to. Not a public
// API: it changes with the tools that use it.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::topo {
struct Topology;
}

namespace tandem::tools_api {

/// OS indices of hardware threads (PUs), sorted, no duplicates.
using CpuList = std::vector<int>;

struct NumaNode {
  int os_index = 0;
  std::uint64_t memory = 0;  ///< bytes local to this node
  CpuList cpus;              ///< empty for a memory-only node
};

struct Core {
  int os_index = 0;
  int numa = -1;  ///< os_index of its NUMA node (-1: unknown)
  CpuList pus;
};

struct Cache {
  int level = 0;  ///< 1, 2, 3...
  std::uint64_t size = 0;
  CpuList cpus;
};

/// A GPU or a NIC.
struct TopoDevice {
  std::string name;         ///< "mlx5_0", "eth0", or the GPU's model
  std::string busid;        ///< its PCI address; empty when not on PCI
  int numa = -1;            ///< its NUMA node when there is exactly one, else -1
  CpuList cpus;             ///< CPUs local to it
  std::size_t bridges = 0;  ///< PCI bridges between it and the CPU side
};

struct Topology {
  std::string source;  ///< "this machine" or the XML file
  std::string hostname;
  bool nvml = false;  ///< NVML answered: the GPUs and NVLinks are the driver's view
  /// This machine without NVML: NVIDIA GPUs seen on PCI but left out of `gpus`.
  int gpus_without_driver = 0;
  std::size_t pci_devices = 0;
  CpuList cpus;                      ///< every PU this process may run on
  std::vector<NumaNode> numa_nodes;  ///< by os_index
  std::vector<Core> cores;           ///< by package, then core
  std::vector<Cache> caches;
  std::vector<TopoDevice> gpus;  ///< NVIDIA GPUs, in PCI bus order (nvidia-smi's)
  std::vector<TopoDevice> nics;  ///< network devices with a PCI address
  /// paths[a][b]: how device a reaches device b, the devices numbered GPUs first, then NICs,
  /// as `nvidia-smi topo -m` names it: X, NV<links>, PIX, PXB, PHB, NODE or SYS.
  std::vector<std::vector<std::string>> paths;
  /// The topo layer's own view, which bind_local_ranks() reads.
  std::shared_ptr<const topo::Topology> detail;

  /// NUMA nodes that have CPUs.
  std::vector<const NumaNode*> cpu_nodes() const;
};

/// This machine, through hwloc (and NVML when libnvidia-ml.so.1 loads), restricted to the
/// CPUs this process may run on. Throws Error(Io) when hwloc fails.
Topology discover();
/// A topology exported with `lstopo-no-graphics --of xml`. Throws Error(InvalidArgument) for
/// a missing or bad file.
Topology from_xml(const std::string& path);
/// Writes this machine's topology as hwloc XML (what from_xml() reads), with NVML's NVLinks.
/// Throws Error(Io) when hwloc fails or the file cannot be written.
void save_xml(const std::string& path);
/// "0-3,8-11".
std::string to_string(const CpuList& cpus);

/// How local ranks are bound to CPUs (tandemrun --cpu-bind).
enum class CpuBind {
  none,  ///< not bound: every rank may run anywhere
  core,  ///< disjoint sets of whole cores, ranks spread over NUMA nodes in blocks
  numa,  ///< every CPU of one NUMA node, nodes dealt round robin
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

/// The CPU sets of `nranks` local ranks under `policy` (see CpuBind). Throws
/// Error(InvalidArgument) when nranks < 1 or the topology has no CPUs.
Binding bind_local_ranks(const Topology& t, CpuBind policy, int nranks);

}  // namespace tandem::tools_api
