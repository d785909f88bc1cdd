#include "topo/binding.hpp"

#include "tandem/error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace tandem::topo {

std::string_view to_string(CpuBind b) noexcept {
  switch (b) {
    case CpuBind::none:
      return "none";
    case CpuBind::core:
      return "core";
    case CpuBind::numa:
      return "numa";
  }
  return "?";
}

std::optional<CpuBind> parse_cpu_bind(std::string_view text) noexcept {
  for (CpuBind b : {CpuBind::none, CpuBind::core, CpuBind::numa})
    if (text == to_string(b)) return b;
  return std::nullopt;
}

namespace {

CpuList merge(const std::vector<const Core*>& cores) {
  CpuList out;
  for (const Core* c : cores) out.insert(out.end(), c->pus.begin(), c->pus.end());
  std::sort(out.begin(), out.end());
  return out;
}

int node_of(const std::vector<const Core*>& cores) {
  const int n = cores.empty() ? -1 : cores.front()->numa;
  for (const Core* c : cores)
    if (c->numa != n) return -1;
  return n;
}

Binding by_core(const Topology& t, int nranks) {
  // Cores grouped by NUMA node, in node order (cores of unknown locality last).
  std::map<int, std::vector<const Core*>> by_node;
  for (const Core& c : t.cores) by_node[c.numa < 0 ? 1 << 30 : c.numa].push_back(&c);
  std::vector<std::vector<const Core*>> groups;
  for (auto& [node, cores] : by_node) groups.push_back(std::move(cores));
  const int total = static_cast<int>(t.cores.size());

  Binding b;
  if (nranks > total) {
    b.warning = fmt::format(
        "--cpu-bind core: {} local ranks but {} cores: ranks share cores (rank r on core r mod "
        "{}); use fewer ranks, or --cpu-bind numa",
        nranks, total, total);
    std::vector<const Core*> flat;
    for (const auto& g : groups) flat.insert(flat.end(), g.begin(), g.end());
    for (int r = 0; r < nranks; ++r) {
      const Core* c = flat[static_cast<std::size_t>(r % total)];
      b.cpus.push_back(c->pus);
      b.numa.push_back(c->numa);
    }
    return b;
  }
  // Ranks per node in proportion to its cores (largest remainders round up).
  std::vector<int> share(groups.size());
  std::vector<std::pair<long, std::size_t>> remainders;
  int given = 0;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const long exact = static_cast<long>(nranks) * static_cast<long>(groups[i].size());
    share[i] = static_cast<int>(exact / total);
    given += share[i];
    remainders.emplace_back(exact % total, i);
  }
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& x, const auto& y) { return x.first > y.first; });
  for (std::size_t k = 0; given < nranks; ++k, ++given) ++share[remainders[k].second];

  for (std::size_t i = 0; i < groups.size(); ++i) {
    const auto& cores = groups[i];
    const std::size_t n = cores.size();
    const auto k = static_cast<std::size_t>(share[i]);
    for (std::size_t j = 0; j < k; ++j) {
      const std::vector<const Core*> mine(cores.begin() + static_cast<long>(j * n / k),
                                          cores.begin() + static_cast<long>((j + 1) * n / k));
      b.cpus.push_back(merge(mine));
      b.numa.push_back(node_of(mine));
    }
  }
  return b;
}

}  // namespace

Binding bind_local_ranks(const Topology& t, CpuBind policy, int nranks) {
  if (nranks < 1)
    TANDEM_THROW(ErrorCode::InvalidArgument, "cannot bind {} local ranks: need at least one",
                 nranks);
  if (t.cores.empty())
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "the topology of {} lists no CPUs: nothing to bind ranks to", t.source);
  switch (policy) {
    case CpuBind::core:
      return by_core(t, nranks);
    case CpuBind::numa: {
      const auto nodes = t.cpu_nodes();
      Binding b;
      for (int r = 0; r < nranks; ++r) {
        if (nodes.empty()) {  // no NUMA information: one node holding every CPU
          b.cpus.push_back(t.all_cpus());
          b.numa.push_back(-1);
          continue;
        }
        const NumaNode* n = nodes[static_cast<std::size_t>(r) % nodes.size()];
        b.cpus.push_back(n->cpus);
        b.numa.push_back(n->os_index);
      }
      return b;
    }
    case CpuBind::none:
      break;
  }
  Binding b;
  const int single = t.cpu_nodes().size() == 1 ? t.cpu_nodes().front()->os_index : -1;
  for (int r = 0; r < nranks; ++r) {
    b.cpus.push_back(t.all_cpus());
    b.numa.push_back(single);
  }
  return b;
}

}  // namespace tandem::topo
