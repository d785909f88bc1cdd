#pragma once
// The machine as tandem sees it: NUMA nodes, cores and their hardware threads (PUs), caches,
// PCI devices, and among them the GPUs and NICs, each with the chain of PCI bridges that
// leads from it to the CPU side. Plain data, filled from hwloc (this machine or an XML
// file) and, for GPUs, from NVML when the driver is installed; nothing here needs hwloc.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tandem::topo {

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

struct PciDevice {
  std::string busid;  ///< "0000:02:00.0"
  std::uint16_t vendor = 0, device = 0, class_id = 0;
  std::vector<std::string> os_names;  ///< what the OS calls it: "eth0", "mlx5_0", "nvme0n1"
};

/// One hop between a device and the CPU side: a PCI bridge, or the host bridge at the top.
struct Hop {
  std::uint64_t id = 0;  ///< unique within one topology
  bool host_bridge = false;
};

enum class DeviceKind { gpu, nic };

struct Device {
  DeviceKind kind = DeviceKind::nic;
  std::string name;   ///< "mlx5_0", "eth0", or the GPU's model for GPUs
  std::string busid;  ///< empty when not on PCI
  /// Bridges from the device upwards, nearest first; empty when the device is not under one.
  std::vector<Hop> bridges;
  std::uint64_t attach = 0;  ///< id of the CPU-side object the tree hangs from (0: unknown)
  int numa = -1;             ///< its NUMA node when there is exactly one, else -1
  CpuList cpus;              ///< CPUs local to the device (its NUMA node's, or all)
  /// For GPUs: NVLinks to other GPUs, by index in Topology::gpus.
  std::map<int, int> nvlinks;
};

/// How two devices reach each other, as `nvidia-smi topo -m` names it.
enum class PathType {
  X,     ///< the same device
  NV,    ///< a bonded set of NVLinks
  PIX,   ///< at most a single PCIe bridge (the same switch)
  PXB,   ///< several PCIe bridges, without a host bridge
  PHB,   ///< a PCIe host bridge (the CPU's root complex)
  NODE,  ///< between host bridges within one NUMA node
  SYS,   ///< across NUMA nodes (QPI/UPI, Infinity Fabric) or locality unknown
};

struct Path {
  PathType type = PathType::SYS;
  int nvlinks = 0;  ///< with NV: the number of links
  /// "X", "NV4", "PIX", ...
  std::string str() const;
  bool operator==(const Path&) const = default;
};

struct Topology {
  std::string source;  ///< "this machine" or the XML file
  std::string hostname;
  std::vector<NumaNode> numa_nodes;  ///< by os_index
  std::vector<Core> cores;           ///< in hwloc's logical order (by package, then core)
  std::vector<Cache> caches;
  std::vector<PciDevice> pci;
  std::vector<Device> gpus;  ///< NVIDIA GPUs, in PCI bus order (nvidia-smi's, NVML's)
  std::vector<Device> nics;  ///< network devices with a PCI address
  bool nvml = false;         ///< NVML answered (GPUs and NVLinks are the driver's view)
  /// This machine without NVML: NVIDIA GPUs seen on PCI but left out of `gpus` (no driver to
  /// use them through).
  int gpus_without_driver = 0;

  /// Every PU of the machine that this process may run on.
  CpuList all_cpus() const;
  /// NUMA nodes that have CPUs.
  std::vector<const NumaNode*> cpu_nodes() const;
};

/// This machine, through hwloc (and NVML when libnvidia-ml.so.1 loads; without it, no
/// GPUs), restricted to the CPUs this process may run on. Throws Error(Io) when hwloc fails.
Topology discover();
/// A topology exported with `lstopo-no-graphics --of xml` (or hwloc_topology_export_xml). GPUs come
/// from NVIDIA PCI devices in the file, NVLinks from their "NVLinkPeer" infos (one per link,
/// value: the peer's PCI bus id). Throws Error(InvalidArgument) for a missing or bad file.
Topology from_xml(const std::string& path);

/// Writes this machine's topology as hwloc XML (what from_xml() reads), with one
/// "NVLinkPeer" info per NVLink that NVML reports, so another machine can show it. Throws
/// Error(Io) when hwloc fails or the file cannot be written.
void save_xml(const std::string& path);

/// The path between two devices of one topology (`a` and `b` may be GPUs or NICs).
Path path_type(const Topology& t, const Device& a, const Device& b);

/// "0-3,8-11".
std::string to_string(const CpuList& cpus);
/// Parses "0-3,8-11" (as Cpus_allowed_list); throws Error(InvalidArgument) when malformed.
CpuList parse_cpu_list(const std::string& text);

}  // namespace tandem::topo
