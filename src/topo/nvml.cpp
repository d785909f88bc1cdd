#include "topo/nvml.hpp"

#include "tandem/log.hpp"

#include <fmt/format.h>

#include <dlfcn.h>
#include <memory>

namespace tandem::topo {
namespace {

// The few NVML declarations used, as nvml.h declares them (ABI stable since NVML 10).
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
};
constexpr int kSuccess = 0;
constexpr unsigned kMaxLinks = 18;  // NVML_NVLINK_MAX_LINKS (Hopper)
constexpr int kDeviceTypeGpu = 0;   // nvmlIntNvLinkDeviceType_t: GPU, IBMNPU, SWITCH

struct Api {
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*count)(unsigned*) = nullptr;
  int (*by_index)(unsigned, nvmlDevice_t*) = nullptr;
  int (*pci)(nvmlDevice_t, nvmlPciInfo_t*) = nullptr;
  int (*name)(nvmlDevice_t, char*, unsigned) = nullptr;
  int (*link_state)(nvmlDevice_t, unsigned, int*) = nullptr;
  int (*remote_pci)(nvmlDevice_t, unsigned, nvmlPciInfo_t*) = nullptr;
  int (*remote_type)(nvmlDevice_t, unsigned, int*) = nullptr;  // newer drivers only
};

struct Closer {
  void operator()(void* h) const noexcept { ::dlclose(h); }
};

template <typename F>
bool bind(void* lib, F& f, const char* symbol) {
  f = reinterpret_cast<F>(::dlsym(lib, symbol));
  return f != nullptr;
}

std::string busid_of(const nvmlPciInfo_t& p) {
  // NVML's domain is 32 bits ("00000000:02:00.0"); hwloc writes 16 ("0000:02:00.0").
  return fmt::format("{:04x}:{:02x}:{:02x}.0", p.domain & 0xffffu, p.bus, p.device);
}

}  // namespace

std::optional<std::vector<NvmlGpu>> query_nvml() {
  std::unique_ptr<void, Closer> lib(::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL));
  if (!lib) {
    TANDEM_DETAIL(init, "topo: no NVML ({}): no GPUs", ::dlerror());
    return std::nullopt;
  }
  Api api;
  void* h = lib.get();
  if (!bind(h, api.init, "nvmlInit_v2") || !bind(h, api.shutdown, "nvmlShutdown") ||
      !bind(h, api.count, "nvmlDeviceGetCount_v2") ||
      !bind(h, api.by_index, "nvmlDeviceGetHandleByIndex_v2") ||
      !bind(h, api.pci, "nvmlDeviceGetPciInfo_v3") || !bind(h, api.name, "nvmlDeviceGetName")) {
    TANDEM_WARN(init,
                "topo: libnvidia-ml.so.1 lacks NVML 10 functions (driver too old?): "
                "GPUs are not shown");
    return std::nullopt;
  }
  bind(h, api.link_state, "nvmlDeviceGetNvLinkState");
  bind(h, api.remote_pci, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
  bind(h, api.remote_type, "nvmlDeviceGetNvLinkRemoteDeviceType");
  if (const int rc = api.init(); rc != kSuccess) {
    TANDEM_DETAIL(init, "topo: nvmlInit failed (error {}): no GPUs", rc);
    return std::nullopt;
  }
  std::vector<NvmlGpu> gpus;
  unsigned n = 0;
  if (api.count(&n) != kSuccess) n = 0;
  for (unsigned i = 0; i < n; ++i) {
    nvmlDevice_t dev = nullptr;
    nvmlPciInfo_t pci{};
    if (api.by_index(i, &dev) != kSuccess || api.pci(dev, &pci) != kSuccess) continue;
    NvmlGpu g;
    g.busid = busid_of(pci);
    char name[96] = {};
    g.name = api.name(dev, name, sizeof(name)) == kSuccess ? name : "NVIDIA GPU";
    for (unsigned link = 0;
         api.link_state != nullptr && api.remote_pci != nullptr && link < kMaxLinks; ++link) {
      int active = 0;
      nvmlPciInfo_t remote{};
      if (api.link_state(dev, link, &active) != kSuccess) break;  // past the last link
      if (active == 0 || api.remote_pci(dev, link, &remote) != kSuccess) continue;
      int type = kDeviceTypeGpu;
      if (api.remote_type != nullptr && api.remote_type(dev, link, &type) != kSuccess)
        type = kDeviceTypeGpu;
      g.link_peers.push_back(busid_of(remote));
      g.to_switch.push_back(type != kDeviceTypeGpu);
    }
    gpus.push_back(std::move(g));
  }
  api.shutdown();
  return gpus;
}

}  // namespace tandem::topo
