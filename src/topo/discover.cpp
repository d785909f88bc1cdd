// Filling Topology from hwloc: this machine (plus NVML) or an XML file.
#include "tandem/error.hpp"
#include "tandem/log.hpp"
#include "topo/nvml.hpp"
#include "topo/topology.hpp"

#include <fmt/format.h>
#include <hwloc.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <filesystem>
#include <sched.h>
#include <set>
#include <system_error>

namespace tandem::topo {
namespace {

constexpr std::uint16_t kNvidia = 0x10de;

class Hwloc {
 public:
  Hwloc() {
    if (hwloc_topology_init(&t_) != 0)
      TANDEM_THROW(ErrorCode::Io, "hwloc_topology_init failed: {}",
                   std::system_category().message(errno));
    // PCI bridges and devices, and the OS devices under them (eth0, mlx5_0).
    hwloc_topology_set_io_types_filter(t_, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  }
  ~Hwloc() { hwloc_topology_destroy(t_); }
  Hwloc(const Hwloc&) = delete;
  Hwloc& operator=(const Hwloc&) = delete;
  hwloc_topology_t get() const noexcept { return t_; }

 private:
  hwloc_topology_t t_ = nullptr;
};

CpuList cpus_of(hwloc_const_bitmap_t set) {
  CpuList out;
  if (set == nullptr) return out;
  for (int i = hwloc_bitmap_first(set); i >= 0; i = hwloc_bitmap_next(set, i)) out.push_back(i);
  return out;
}

int single_node(hwloc_const_bitmap_t nodeset) {
  return nodeset != nullptr && hwloc_bitmap_weight(nodeset) == 1 ? hwloc_bitmap_first(nodeset) : -1;
}

std::string busid_of(hwloc_obj_t o) {
  const auto& p = o->attr->pcidev;
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", p.domain, p.bus, p.dev, p.func);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Where a PCI device sits: its bridges up to the CPU side, and that side's locality.
void place(hwloc_topology_t t, hwloc_obj_t pcidev, Device& d) {
  d.busid = busid_of(pcidev);
  for (hwloc_obj_t p = pcidev->parent; p != nullptr && p->type == HWLOC_OBJ_BRIDGE; p = p->parent)
    d.bridges.push_back({p->gp_index, p->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST});
  hwloc_obj_t cpu_side = hwloc_get_non_io_ancestor_obj(t, pcidev);
  if (cpu_side != nullptr) {
    d.attach = cpu_side->gp_index;
    d.numa = single_node(cpu_side->nodeset);
    d.cpus = cpus_of(cpu_side->cpuset);
  }
}

std::string gpu_name(hwloc_obj_t o) {
  if (const char* model = hwloc_obj_get_info_by_name(o, "PCIDevice"); model != nullptr)
    return model;
  return fmt::format("NVIDIA GPU [10de:{:04x}]", o->attr->pcidev.device_id);
}

void fill_cpus(hwloc_topology_t t, Topology& out) {
  hwloc_obj_t root = hwloc_get_root_obj(t);
  if (const char* host = hwloc_obj_get_info_by_name(root, "HostName"); host != nullptr)
    out.hostname = host;
  for (hwloc_obj_t n = nullptr; (n = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, n));)
    out.numa_nodes.push_back(
        {static_cast<int>(n->os_index), n->attr->numanode.local_memory, cpus_of(n->cpuset)});
  std::sort(out.numa_nodes.begin(), out.numa_nodes.end(),
            [](const NumaNode& a, const NumaNode& b) { return a.os_index < b.os_index; });
  // Machines (or containers) where hwloc finds no cores: each PU counts as a core.
  const hwloc_obj_type_t core_type =
      hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
  for (hwloc_obj_t c = nullptr; (c = hwloc_get_next_obj_by_type(t, core_type, c));) {
    if (hwloc_bitmap_iszero(c->cpuset)) continue;
    out.cores.push_back(
        {static_cast<int>(c->os_index), single_node(c->nodeset), cpus_of(c->cpuset)});
  }
  for (int depth = 0; depth < hwloc_topology_get_depth(t); ++depth) {
    const hwloc_obj_type_t type = hwloc_get_depth_type(t, depth);
    if (!hwloc_obj_type_is_dcache(type)) continue;
    for (hwloc_obj_t c = nullptr; (c = hwloc_get_next_obj_by_depth(t, depth, c));)
      out.caches.push_back(
          {static_cast<int>(c->attr->cache.depth), c->attr->cache.size, cpus_of(c->cpuset)});
  }
  std::sort(out.caches.begin(), out.caches.end(),
            [](const Cache& a, const Cache& b) { return a.level < b.level; });
}

void fill_devices(hwloc_topology_t t, Topology& out) {
  std::vector<hwloc_obj_t> gpu_objs;
  for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_pcidev(t, o));) {
    PciDevice p;
    p.busid = busid_of(o);
    p.vendor = o->attr->pcidev.vendor_id;
    p.device = o->attr->pcidev.device_id;
    p.class_id = o->attr->pcidev.class_id;
    std::string fabric, network;
    for (hwloc_obj_t c = o->io_first_child; c != nullptr; c = c->next_sibling) {
      if (c->type != HWLOC_OBJ_OS_DEVICE || c->name == nullptr) continue;
      p.os_names.emplace_back(c->name);
      if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS && fabric.empty()) fabric = c->name;
      if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK && network.empty()) network = c->name;
    }
    if (p.vendor == kNvidia && (p.class_id >> 8) == 0x03) {  // display controller
      Device d;
      d.kind = DeviceKind::gpu;
      d.name = gpu_name(o);
      place(t, o, d);
      out.gpus.push_back(std::move(d));
      gpu_objs.push_back(o);
    } else if (!fabric.empty() || !network.empty()) {
      Device d;
      d.kind = DeviceKind::nic;
      d.name = fabric.empty() ? network : fabric;  // RDMA name first, as nvidia-smi does
      place(t, o, d);
      out.nics.push_back(std::move(d));
    }
    out.pci.push_back(std::move(p));
  }
  // NVLinks written into an XML file: one "NVLinkPeer" info per link.
  for (std::size_t i = 0; i < gpu_objs.size(); ++i) {
    for (unsigned k = 0; k < gpu_objs[i]->infos_count; ++k) {
      const hwloc_info_s& info = gpu_objs[i]->infos[k];
      if (std::string_view(info.name) != "NVLinkPeer") continue;
      for (std::size_t j = 0; j < out.gpus.size(); ++j)
        if (out.gpus[j].busid == lower(info.value)) ++out.gpus[i].nvlinks[static_cast<int>(j)];
    }
  }
}

void merge_nvml(const std::vector<NvmlGpu>& nv, Topology& out) {
  out.nvml = true;
  std::vector<int> index(nv.size());
  for (std::size_t i = 0; i < nv.size(); ++i) {
    auto it = std::find_if(out.gpus.begin(), out.gpus.end(),
                           [&](const Device& d) { return d.busid == nv[i].busid; });
    if (it == out.gpus.end()) {
      Device d;
      d.kind = DeviceKind::gpu;
      d.busid = nv[i].busid;
      d.cpus = out.all_cpus();
      out.gpus.push_back(std::move(d));
      it = out.gpus.end() - 1;
    }
    it->name = nv[i].name;
    it->nvlinks.clear();
    index[i] = static_cast<int>(it - out.gpus.begin());
  }
  std::vector<int> switch_links(out.gpus.size(), 0);
  for (std::size_t i = 0; i < nv.size(); ++i) {
    Device& d = out.gpus[static_cast<std::size_t>(index[i])];
    for (std::size_t l = 0; l < nv[i].link_peers.size(); ++l) {
      const auto peer = std::find_if(out.gpus.begin(), out.gpus.end(), [&](const Device& g) {
        return g.busid == nv[i].link_peers[l];
      });
      if (!nv[i].to_switch[l] && peer != out.gpus.end())
        ++d.nvlinks[static_cast<int>(peer - out.gpus.begin())];
      else
        ++switch_links[static_cast<std::size_t>(index[i])];
    }
  }
  for (std::size_t a = 0; a < out.gpus.size(); ++a)
    for (std::size_t b = 0; b < out.gpus.size(); ++b)
      if (a != b && switch_links[a] > 0 && switch_links[b] > 0)
        out.gpus[a].nvlinks[static_cast<int>(b)] += std::min(switch_links[a], switch_links[b]);
}

Topology load(Hwloc& h, std::string source) {
  if (hwloc_topology_load(h.get()) != 0)
    TANDEM_THROW(ErrorCode::Io, "hwloc could not read the topology of {}: {}", source,
                 std::system_category().message(errno));
  Topology out;
  out.source = std::move(source);
  fill_cpus(h.get(), out);
  fill_devices(h.get(), out);
  return out;
}

void sort_gpus(Topology& t) {
  // nvidia-smi's (and NVML's default) order is PCI bus order; NVLink indices follow.
  std::vector<std::size_t> order(t.gpus.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return t.gpus[a].busid < t.gpus[b].busid; });
  std::vector<int> new_index(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) new_index[order[i]] = static_cast<int>(i);
  std::vector<Device> sorted;
  for (std::size_t i : order) {
    Device d = std::move(t.gpus[i]);
    std::map<int, int> links;
    for (const auto& [peer, n] : d.nvlinks) links[new_index[static_cast<std::size_t>(peer)]] = n;
    d.nvlinks = std::move(links);
    sorted.push_back(std::move(d));
  }
  t.gpus = std::move(sorted);
}

// hwloc leaves out CPUs a cgroup forbids, not those outside this process's affinity mask
// (taskset, a launcher's binding): drop those too, so that ranks are bound only within it.
void restrict_to_affinity(Topology& t) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return;
  const auto keep = [&](CpuList& cpus) {
    std::erase_if(cpus, [&](int c) { return c >= CPU_SETSIZE || !CPU_ISSET(c, &set); });
  };
  for (Core& c : t.cores) keep(c.pus);
  std::erase_if(t.cores, [](const Core& c) { return c.pus.empty(); });
  for (NumaNode& n : t.numa_nodes) keep(n.cpus);
  for (Cache& c : t.caches) keep(c.cpus);
  std::erase_if(t.caches, [](const Cache& c) { return c.cpus.empty(); });
}

}  // namespace

void apply_nvml(const std::vector<NvmlGpu>& nv, Topology& t) {
  merge_nvml(nv, t);
  sort_gpus(t);
}

Topology discover() {
  Hwloc h;
  Topology t = load(h, "this machine");
  restrict_to_affinity(t);
  if (const auto nv = query_nvml()) {
    apply_nvml(*nv, t);
  } else {
    t.gpus_without_driver = static_cast<int>(t.gpus.size());
    t.gpus.clear();
  }
  sort_gpus(t);
  TANDEM_DETAIL(init, "topo: {} NUMA node(s), {} core(s), {} GPU(s), {} NIC(s)",
                t.numa_nodes.size(), t.cores.size(), t.gpus.size(), t.nics.size());
  return t;
}

void save_xml(const std::string& path) {
  Hwloc h;
  if (hwloc_topology_load(h.get()) != 0)
    TANDEM_THROW(ErrorCode::Io, "hwloc could not read the topology of this machine: {}",
                 std::system_category().message(errno));
  if (const auto nv = query_nvml()) {
    for (const NvmlGpu& g : *nv) {
      hwloc_obj_t o = hwloc_get_pcidev_by_busidstring(h.get(), g.busid.c_str());
      if (o == nullptr) continue;
      for (std::size_t l = 0; l < g.link_peers.size(); ++l)
        if (!g.to_switch[l]) hwloc_obj_add_info(o, "NVLinkPeer", g.link_peers[l].c_str());
    }
  }
  if (hwloc_topology_export_xml(h.get(), path.c_str(), 0) != 0)
    TANDEM_THROW(ErrorCode::Io, "cannot write the topology to {}: {}", path,
                 std::system_category().message(errno));
}

Topology from_xml(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "topology file {} does not exist or is not a file (write one with "
                 "`lstopo-no-graphics --of xml FILE` on the machine to describe)",
                 path);
  Hwloc h;
  if (hwloc_topology_set_xml(h.get(), path.c_str()) != 0)
    TANDEM_THROW(ErrorCode::InvalidArgument, "hwloc cannot read {} as XML: {}", path,
                 std::system_category().message(errno));
  // An XML file does not describe this process's bindings: take every PU it lists.
  hwloc_topology_set_flags(h.get(), HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
  Topology t;
  try {
    t = load(h, path);
  } catch (const Error& e) {
    TANDEM_THROW(ErrorCode::InvalidArgument, "{} is not a usable hwloc XML topology: {}", path,
                 e.message());
  }
  sort_gpus(t);
  return t;
}

}  // namespace tandem::topo
