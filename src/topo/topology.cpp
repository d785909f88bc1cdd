#include "topo/topology.hpp"

#include "tandem/error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace tandem::topo {

std::string Path::str() const {
  switch (type) {
    case PathType::X:
      return "X";
    case PathType::NV:
      return fmt::format("NV{}", nvlinks);
    case PathType::PIX:
      return "PIX";
    case PathType::PXB:
      return "PXB";
    case PathType::PHB:
      return "PHB";
    case PathType::NODE:
      return "NODE";
    case PathType::SYS:
      return "SYS";
  }
  return "?";
}

CpuList Topology::all_cpus() const {
  CpuList all;
  for (const Core& c : cores) all.insert(all.end(), c.pus.begin(), c.pus.end());
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  return all;
}

std::vector<const NumaNode*> Topology::cpu_nodes() const {
  std::vector<const NumaNode*> out;
  for (const NumaNode& n : numa_nodes)
    if (!n.cpus.empty()) out.push_back(&n);
  return out;
}

namespace {

int gpu_index(const Topology& t, const Device& d) {
  for (std::size_t i = 0; i < t.gpus.size(); ++i)
    if (&t.gpus[i] == &d || (!d.busid.empty() && t.gpus[i].busid == d.busid))
      return static_cast<int>(i);
  return -1;
}

bool same_device(const Device& a, const Device& b) {
  if (&a == &b) return true;
  return a.kind == b.kind && a.name == b.name && a.busid == b.busid;
}

}  // namespace

Path path_type(const Topology& t, const Device& a, const Device& b) {
  if (same_device(a, b)) return {PathType::X, 0};
  if (a.kind == DeviceKind::gpu && b.kind == DeviceKind::gpu) {
    const int ib = gpu_index(t, b);
    const auto it = a.nvlinks.find(ib);
    if (ib >= 0 && it != a.nvlinks.end() && it->second > 0) return {PathType::NV, it->second};
  }
  // The lowest bridge both devices sit under, and how many bridges each side crosses below it.
  for (std::size_t i = 0; i < a.bridges.size(); ++i) {
    for (std::size_t j = 0; j < b.bridges.size(); ++j) {
      if (a.bridges[i].id != b.bridges[j].id) continue;
      if (a.bridges[i].host_bridge) return {PathType::PHB, 0};
      // Below one switch: each device behind at most its own downstream port.
      return {i <= 1 && j <= 1 ? PathType::PIX : PathType::PXB, 0};
    }
  }
  if (a.attach != 0 && b.attach != 0 && a.numa >= 0 && a.numa == b.numa) return {PathType::NODE, 0};
  return {PathType::SYS, 0};
}

std::string to_string(const CpuList& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return out;
}

CpuList parse_cpu_list(const std::string& text) {
  CpuList out;
  const auto bad = [&](std::string_view why) {
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "'{}' is not a CPU list ({}); write it as Linux does, e.g. 0-3,8-11", text, why);
  };
  const auto number = [&](std::string_view s) {
    int v = -1;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || p != s.data() + s.size() || v < 0) bad("a CPU is not a number");
    return v;
  };
  std::string_view rest(text);
  while (!rest.empty() && (rest.back() == '\n' || rest.back() == ' ')) rest.remove_suffix(1);
  while (!rest.empty()) {
    const std::size_t comma = std::min(rest.find(','), rest.size());
    const std::string_view item = rest.substr(0, comma);
    rest = comma < rest.size() ? rest.substr(comma + 1) : std::string_view{};
    if (item.empty()) bad("an empty item");
    const std::size_t dash = item.find('-');
    const int lo = number(item.substr(0, dash));
    const int hi = dash == std::string_view::npos ? lo : number(item.substr(dash + 1));
    if (hi < lo) bad("a range ends before it starts");
    for (int c = lo; c <= hi; ++c) out.push_back(c);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace tandem::topo
