#pragma once
// NVIDIA's management library, loaded at run time (dlopen of libnvidia-ml.so.1, as
// nvidia-smi does), so that tandem neither builds against CUDA nor needs the driver.

#include "topo/topology.hpp"

#include <optional>
#include <string>
#include <vector>

namespace tandem::topo {

struct NvmlGpu {
  std::string busid;  ///< "0000:02:00.0" (hwloc's spelling)
  std::string name;   ///< "NVIDIA H100 80GB HBM3"
  /// The device at the far end of each active NVLink: another GPU's bus id, or the bus id
  /// of an NVSwitch (or a CPU) when `to_switch` is set for that link.
  std::vector<std::string> link_peers;
  std::vector<bool> to_switch;
};

/// The GPUs NVML reports, or nullopt when the library is absent or does not initialise (no
/// driver, no GPU): never an error.
std::optional<std::vector<NvmlGpu>> query_nvml();

/// Puts NVML's view into `t`: GPU names, GPUs hwloc did not place (locality unknown), and
/// NVLinks (replacing any from an XML file). GPUs that reach each other through NVSwitches
/// count as linked by the smaller of their numbers of switch links, as nvidia-smi shows
/// them. Leaves t.gpus in PCI bus order.
void apply_nvml(const std::vector<NvmlGpu>& nv, Topology& t);

}  // namespace tandem::topo
